import { spawn } from "node:child_process";
import http2 from "node:http2";
import { createServer as createHttpServer, request, type Server } from "node:http";
import { connect, createServer as createTcpServer, type AddressInfo, type Server as TcpServer, type Socket } from "node:net";
import { Writable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_TIMEOUTS } from "../../../src/config.js";
import { createLogger } from "../../../src/logger.js";
import type { ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import type { RouteTarget } from "../../../src/module.js";
import { CALLER_TOKEN, MODEL, callEndpoint, metricValue, startProxy, startReplica, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { waitFor } from "../../support/wait.js";

// The endpoint proxy when replicas fail, hang or are slow, and when callers leave: real model
// servers that are really stopped, a port that refuses, a socket that never answers.

let proxy: ProxyUnderTest;
const opened: Array<{ close(): Promise<void> | void }> = [];
const chat = { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1 };

/** A logger whose lines are kept, parsed, in `lines`. */
function capturedLog(): { logger: ReturnType<typeof createLogger>; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger("info", destination), lines };
}

const log = capturedLog();
const logged = (msg: string) => log.lines.filter((line) => line.msg === msg).length;

beforeAll(async () => {
  proxy = await startProxy({ firstByteMs: 400, logger: log.logger });
});

afterEach(async () => {
  for (const item of opened.splice(0)) await item.close();
  proxy.endpoints.clear();
  proxy.routings.clear();
});

afterAll(async () => {
  await proxy?.close();
});

async function replica(instanceId: string, tokenDelayMs = 20): Promise<{ server: ModelServer; target: RouteTarget }> {
  const started = await startReplica(instanceId, { tokenDelayMs });
  opened.push(started.server);
  return started;
}

/** A replica whose machine is gone: its port refuses connections. */
async function deadTarget(instanceId: string): Promise<RouteTarget> {
  const { server, target } = await startReplica(instanceId);
  await server.close();
  return target;
}

/** A replica that accepts connections and never answers (a hung model). */
async function hungTarget(instanceId: string): Promise<{ target: RouteTarget; sockets: Socket[]; closed: () => number }> {
  const sockets: Socket[] = [];
  let closed = 0;
  const server: TcpServer = createTcpServer((socket) => {
    sockets.push(socket.on("error", () => undefined).on("close", () => (closed += 1)));
    socket.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  opened.push({ close: () => new Promise<void>((resolve) => { for (const s of sockets) s.destroy(); server.close(() => resolve()); }) });
  return { target: { instanceId, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null }, sockets, closed: () => closed };
}

/**
 * A frozen machine: a process stopped (SIGSTOP) with its listening queue full, so that a new
 * connection attempt gets no answer at all, as from a host gone from the network.
 */
async function frozenTarget(instanceId: string): Promise<RouteTarget> {
  const script = "require('net').createServer().listen({ port: 0, host: '127.0.0.1', backlog: 1 }, function () { console.log(this.address().port) })";
  const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] });
  const port = Number(await new Promise<string>((resolve) => child.stdout!.once("data", (data: Buffer) => resolve(data.toString().trim()))));
  child.kill("SIGSTOP");
  // The kernel completes as many connections as the queue holds; the next ones hang.
  const fillers: Socket[] = [];
  for (let i = 0; i < 2; i++) {
    const socket = connect(Number(port), "127.0.0.1").on("error", () => undefined);
    fillers.push(socket);
    await new Promise((resolve) => socket.once("connect", resolve));
  }
  opened.push({
    close: () => {
      for (const socket of fillers) socket.destroy();
      child.kill("SIGKILL");
    },
  });
  return { instanceId, url: `http://127.0.0.1:${port}`, apiKey: null };
}

/**
 * A replica that answers every request with `status` (a model server still loading answers 503),
 * after `delayMs` (a cold model's first token).
 */
async function answeringTarget(
  instanceId: string,
  status: number,
  delayMs = 0,
): Promise<{ target: RouteTarget; hits: () => number; connections: () => number }> {
  let hits = 0;
  let connections = 0;
  const server: Server = createHttpServer((req, res) => {
    hits += 1;
    req.resume();
    setTimeout(() => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "loading" } }));
    }, delayMs);
  });
  server.on("connection", () => (connections += 1));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  opened.push({ close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }) });
  const target = { instanceId, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null };
  return { target, hits: () => hits, connections: () => connections };
}

describe("endpoint proxy under faults", () => {
  it("retries a request once on another ready replica when the first refuses the connection, then passes that one over", async () => {
    const live = await replica("gpu-live");
    proxy.endpoints.set("fa", [await deadTarget("gpu-dead"), live.target]);
    const retries = await metricValue(proxy, "gpu_endpoint_retries_total", 'endpoint="fa"');
    for (let i = 0; i < 6; i++) {
      const res = await callEndpoint(proxy, "/endpoints/fa/v1/chat/completions", chat);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-endpoint-instance")).toBe("gpu-live");
      await res.text();
    }
    expect(live.server.stats.completions).toBe(6);
    // Taking turns, the dead replica would have been tried three times; shunned, it was tried once.
    expect(await metricValue(proxy, "gpu_endpoint_retries_total", 'endpoint="fa"')).toBe(retries + 1);
  });

  it("learns a prompt on the replica it was retried on: on an endpoint routed by prefix, the conversation's next turn is a hit there", async () => {
    const replicas = [await replica("gpu-pa"), await replica("gpu-pb"), await replica("gpu-pc")];
    proxy.endpoints.set("fp", replicas.map((r) => r.target));
    proxy.routings.set("fp", "prefix");
    const messages = [
      { role: "system", content: "You answer questions about ships. ".repeat(20) },
      { role: "user", content: "Question 1?" },
    ];
    const ask = async () => {
      const res = await callEndpoint(proxy, "/endpoints/fp/v1/chat/completions", { model: MODEL, messages, max_tokens: 1 });
      expect(res.status).toBe(200);
      await res.text();
      messages.push({ role: "assistant", content: "Hello" }, { role: "user", content: `Question ${messages.length}?` });
      return res.headers.get("x-endpoint-instance")!;
    };
    const routed = (outcome: string) => metricValue(proxy, "gpu_endpoint_prefix_routed_total", `endpoint="fp",outcome="${outcome}"`);
    const retried = () => metricValue(proxy, "gpu_endpoint_retries_total", 'endpoint="fp"');

    const first = await ask();
    // The replica holding the conversation goes away while the directory still lists it.
    const holder = replicas.find((r) => r.target.instanceId === first)!;
    await holder.server.close();
    opened.splice(opened.indexOf(holder.server), 1);
    // Its idle connection's close seen: the next request opens a new one, which is refused.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const [hits, retries] = [await routed("hit"), await retried()];
    // A hit on the holder, refused, retried on another replica.
    const second = await ask();
    expect(second).not.toBe(first);
    expect(await retried()).toBe(retries + 1);
    expect(await routed("hit")).toBe(hits + 1);
    // That replica holds the whole of the turn it answered: the next turn is a hit there (the
    // holder, passed over for its refusal, holds as much; untaught, the index would find only it).
    expect(await ask()).toBe(second);
    expect(await routed("hit")).toBe(hits + 2);
    expect(await routed("balanced")).toBe(0);
  });

  it("retries a 503 from a replica on another one, with the same body", async () => {
    const loading = await answeringTarget("gpu-loading", 503);
    const live = await replica("gpu-live");
    proxy.endpoints.set("fb", [loading.target, live.target]);
    for (let i = 0; i < 4; i++) {
      const res = await callEndpoint(proxy, "/endpoints/fb/v1/chat/completions", { ...chat, max_tokens: 2 });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe("Hello from");
    }
    expect(loading.hits()).toBeGreaterThan(0);
    expect(live.server.stats.completions).toBe(4);
  });

  it("answers 502 naming the replica when the only one cannot be reached, and passes a 503 through when no other is ready", async () => {
    proxy.endpoints.set("fc", [await deadTarget("gpu-dead")]);
    const res = await callEndpoint(proxy, "/endpoints/fc/v1/chat/completions", chat);
    expect(res.status).toBe(502);
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-dead");
    expect(((await res.json()) as { detail: string }).detail).toMatch(/gpu-dead could not be reached/);

    const loading = await answeringTarget("gpu-loading", 503);
    proxy.endpoints.set("fc", [loading.target]);
    const passed = await callEndpoint(proxy, "/endpoints/fc/v1/chat/completions", chat);
    expect(passed.status).toBe(503);
    expect(((await passed.json()) as { error: { message: string } }).error.message).toBe("loading");
    expect(loading.hits()).toBe(1);
  });

  it("never retries once the answer has started: a replica dying mid-stream cuts an answer that cannot be continued, counted 502 (not 499)", async () => {
    const dying = await replica("gpu-dying", 100);
    const other = await replica("gpu-other");
    proxy.endpoints.set("fd", [dying.target]);
    const count = (code: number) => metricValue(proxy, "gpu_endpoint_requests_total", `endpoint="fd",code="${code}"`);
    const [upstreamErrors, callersLeft] = [await count(502), await count(499)];
    // Two choices: no continuation could be the same answer.
    const res = await callEndpoint(proxy, "/endpoints/fd/v1/chat/completions", { ...chat, stream: true, max_tokens: 50, n: 2 });
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-dying");
    proxy.endpoints.set("fd", [dying.target, other.target]);
    const reader = res.body!.getReader();
    await reader.read();
    await dying.server.close();
    let text = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    // One error event ends it, and no [DONE]: never a silent end that looks complete.
    expect(text).toMatch(/data: \{"error":\{"message":"replica gpu-dying failed mid-answer \(.*\), and this answer cannot be continued: it asks n = 2 choices","type":"upstream_error","code":502\}\}\n\n$/);
    expect(text).not.toContain("data: [DONE]");
    expect(other.server.stats.completions).toBe(0);
    // The caller stayed: the replica failed it, and the count says so.
    await waitFor(async () => (await count(502)) === upstreamErrors + 1, "the cut answer counted 502", 2000);
    expect(await count(499)).toBe(callersLeft);
  });

  it("gives up a connection attempt to a frozen machine after 5 s and retries on another replica", async () => {
    // This file's proxy gives up on a first byte after 400 ms; this one waits the default 300 s.
    const patient = await startProxy();
    opened.push(patient);
    const live = await replica("gpu-live");
    patient.endpoints.set("fi", [await frozenTarget("gpu-frozen"), live.target]);
    const started = Date.now();
    // Two at once: one goes to each replica.
    const answers = await Promise.all([0, 1].map(async () => {
      const res = await callEndpoint(patient, "/endpoints/fi/v1/chat/completions", chat);
      return { status: res.status, instance: res.headers.get("x-endpoint-instance"), ms: Date.now() - started, body: await res.text() };
    }));
    expect(answers.map((a) => [a.status, a.instance])).toEqual([[200, "gpu-live"], [200, "gpu-live"]]);
    expect(Math.max(...answers.map((a) => a.ms))).toBeGreaterThanOrEqual(4900);
    expect(Math.max(...answers.map((a) => a.ms))).toBeLessThan(15_000);
    expect(await metricValue(patient, "gpu_endpoint_retries_total", 'endpoint="fi"')).toBe(1);
  });

  it("answers 504 when the replica sends nothing within GPU_ENDPOINT_FIRST_BYTE_MS, and drops its connection", async () => {
    const hung = await hungTarget("gpu-hung");
    proxy.endpoints.set("fe", [hung.target]);
    const started = Date.now();
    const res = await callEndpoint(proxy, "/endpoints/fe/v1/chat/completions", chat);
    expect(res.status).toBe(504);
    expect(Date.now() - started).toBeGreaterThanOrEqual(390);
    expect(((await res.json()) as { detail: string }).detail).toBe("replica gpu-hung sent no answer within 400 ms");
    await waitFor(() => hung.sockets.length === 1 && hung.closed() === 1, "the hung connection dropped", 2000);
  });

  it("aborts the replica's request when the caller disconnects: the model server sees the close", async () => {
    const slow = await replica("gpu-slow", 50);
    proxy.endpoints.set("ff", [slow.target]);
    const gone = await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="ff",code="499"');
    await new Promise<void>((resolve, reject) => {
      const req = request(`${proxy.url}/endpoints/ff/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json" },
      });
      req.once("response", (res) => res.once("data", () => {
        req.destroy();
        resolve();
      }));
      req.once("error", (err) => (req.destroyed ? undefined : reject(err)));
      req.end(JSON.stringify({ ...chat, stream: true, max_tokens: 1000 }));
    });
    await waitFor(() => slow.server.stats.abandoned === 1, "the model server to see its client leave", 3000);
    // The caller left: nothing to warn about, the replica cut nothing.
    expect(log.lines.filter((line) => (line.level as number) >= 40 && line.endpoint === "ff")).toEqual([]);
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="ff",code="499"')).toBe(gone + 1);
  });

  it("never sends the request of a caller that left while the directory was being asked, and counts it 499", async () => {
    let entered!: () => void;
    let release!: () => void;
    const asked = new Promise<void>((resolve) => (entered = resolve));
    const slow = await startProxy({
      holdLookup: () => {
        entered();
        return new Promise<void>((resolve) => (release = resolve));
      },
    });
    opened.push(slow);
    const recorder = await answeringTarget("gpu-rec", 200);
    slow.endpoints.set("fj", [recorder.target]);
    const req = request(`${slow.url}/endpoints/fj/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json" },
    });
    req.on("error", () => undefined);
    req.end(JSON.stringify(chat));
    await asked;
    req.destroy();
    // The proxy runs in this process: a loopback close reaches it within a few turns of the loop.
    await new Promise((resolve) => setTimeout(resolve, 200));
    release();
    const left = () => metricValue(slow, "gpu_endpoint_requests_total", 'endpoint="fj",code="499"');
    await waitFor(async () => recorder.connections() > 0 || (await left()) === 1, "the proxy to be done with the request", 3000);
    // Not even a connection: a request sent for nobody would hold one, and count as outstanding
    // on that replica, until GPU_ENDPOINT_FIRST_BYTE_MS.
    expect(recorder.connections()).toBe(0);
    expect(recorder.hits()).toBe(0);
    expect(await left()).toBe(1);
  });

  it("says a failing directory once per 10 s with a count, and once per outage to held requests, not per request or poll", async () => {
    const { logger, lines } = capturedLog();
    let away = false;
    const failing = await startProxy({
      logger,
      hold: { ms: 10_000, max: 10 },
      holdLookup: async () => {
        if (away) throw new Error("database away");
      },
    });
    opened.push(failing);
    failing.endpoints.set("fk", []);
    failing.coming.set("fk", { coming: true });
    const held = callEndpoint(failing, "/endpoints/fk/v1/chat/completions", chat);
    await new Promise((resolve) => setTimeout(resolve, 100));

    // The directory fails for a second: every new request is answered 503, the held one waits
    // through four polls that fail.
    away = true;
    const refused = await Promise.all(Array.from({ length: 20 }, () => callEndpoint(failing, "/endpoints/fk/v1/chat/completions", chat)));
    expect(refused.map((res) => res.status)).toEqual(Array(20).fill(503));
    await new Promise((resolve) => setTimeout(resolve, 1000));
    away = false;
    const replica = await answeringTarget("gpu-fk", 200);
    failing.endpoints.set("fk", [replica.target]);
    expect((await held).status).toBe(200);

    const said = (msg: string) => lines.filter((line) => line.msg === msg);
    expect(said("endpoint directory failed: requests answered 503")).toMatchObject([{ requests: 1, endpoint: "fk" }]);
    expect(said("endpoint directory failed while requests are held")).toHaveLength(1);
  });

  it("gives an HTTP/2 caller its answer when the replica's first byte comes after HTTP2_IDLE_TIMEOUT_MS", async () => {
    // The session has a stream open and no frame either way while the model thinks: not idle.
    const patient = await startProxy({ firstByteMs: 5_000, timeouts: { ...DEFAULT_TIMEOUTS, http2IdleMs: 300 } });
    opened.push(patient);
    const thinking = await answeringTarget("gpu-cold", 200, 1_000);
    patient.endpoints.set("fk", [thinking.target]);
    const session = http2.connect(patient.url);
    session.on("error", () => undefined);
    opened.push({ close: () => void session.destroy() });
    const stream = session.request({ ":method": "POST", ":path": "/endpoints/fk/v1/chat/completions", authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json" });
    stream.on("error", () => undefined);
    stream.end(JSON.stringify(chat));
    let body = "";
    let status: number | undefined;
    stream.on("data", (chunk: Buffer) => (body += chunk.toString()));
    stream.once("response", (headers) => (status = headers[":status"]));
    await new Promise((resolve) => stream.once("close", resolve));
    expect(status).toBe(200);
    expect(JSON.parse(body)).toEqual({ error: { message: "loading" } });
  });

  it("sends each request to the replica with the fewest in flight, and spreads an idle endpoint's requests", async () => {
    const a = await replica("gpu-a", 50);
    const b = await replica("gpu-b", 50);
    proxy.endpoints.set("fg", [a.target, b.target]);
    const held = await callEndpoint(proxy, "/endpoints/fg/v1/chat/completions", { ...chat, stream: true, max_tokens: 40 });
    const busy = held.headers.get("x-endpoint-instance");
    const seen: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await callEndpoint(proxy, "/endpoints/fg/v1/chat/completions", chat);
      seen.push(res.headers.get("x-endpoint-instance")!);
      await res.text();
    }
    expect(new Set(seen)).toEqual(new Set([busy === "gpu-a" ? "gpu-b" : "gpu-a"]));
    await held.body!.cancel();
    await waitFor(() => a.server.stats.abandoned + b.server.stats.abandoned === 1, "the held stream to end", 3000);

    const idle: string[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await callEndpoint(proxy, "/endpoints/fg/v1/chat/completions", chat);
      idle.push(res.headers.get("x-endpoint-instance")!);
      await res.text();
    }
    expect(idle.filter((id) => id === "gpu-a").length).toBe(3);
  });

  it("spreads 32 concurrent streams evenly over 4 replicas", async () => {
    const four = await Promise.all(["gpu-1", "gpu-2", "gpu-3", "gpu-4"].map((id) => replica(id, 30)));
    proxy.endpoints.set("fh", four.map((r) => r.target));
    const answers = await Promise.all(
      Array.from({ length: 32 }, async () => {
        const res = await callEndpoint(proxy, "/endpoints/fh/v1/chat/completions", { ...chat, stream: true, max_tokens: 10 });
        await res.text();
        return res.headers.get("x-endpoint-instance")!;
      }),
    );
    for (const r of four) expect(answers.filter((id) => id === r.target.instanceId).length).toBe(8);
  });
});
