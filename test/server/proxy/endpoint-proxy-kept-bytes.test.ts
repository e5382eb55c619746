import { readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEndpoint } from "../../gpu/endpoints/helpers.js";
import { CALLER_TOKEN, callEndpoint, callReadingLate, metricValue, MODEL, recordingReplica, startProxy, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { spawnService, type ServiceProcess } from "../../support/spawn-service.js";
import { waitFor } from "../../support/wait.js";

// The bytes the endpoint proxy keeps for holding and retries are bounded per process
// (GPU_ENDPOINT_KEPT_BODY_BYTES): a flood of large requests to an endpoint whose replica is still
// starting holds what fits and refuses the rest 503 at once, from their headers, their bodies
// unread and their connections closed, and the process's resident memory stays within the
// README's container advice. The real service as a process, under the README's production heap
// setting and the default bound, on loopback; its only replica stays `creating` for the whole test.

const MiB = 2 ** 20;
/** GPU_ENDPOINT_KEPT_BODY_BYTES's default. */
const KEPT_LIMIT = 64 * MiB;
/** MAX_BODY_BYTES's default: the largest body a caller may send. */
const BODY_BYTES = MiB;
const FLOOD = 600;
const HOLD_MS = 120_000;
/** What fits: each held request keeps its whole (declared) body. */
const FITS = Math.floor(KEPT_LIMIT / BODY_BYTES);
/** The README's container has 512 MiB; this leaves room for an indexing run beside the flood. */
const PEAK_RSS_BOUND = 400 * MiB;

let db: TestDatabase;
let service: ServiceProcess | undefined;
const closing: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  for (const close of closing) await close();
  await service?.stop("SIGKILL");
  await db?.drop();
});

/** A field of /proc/<pid>/status in bytes: VmRSS (resident now) or VmHWM (the peak so far). */
function memoryBytes(pid: number, field: "VmRSS" | "VmHWM"): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(`${field}:`))!;
  return Number(line.split(/\s+/)[1]) * 1024;
}

async function metricsText(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}

/** The value of one sample (`name{labels}` or `name` alone), 0 when absent. */
function sample(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.split(" ").pop());
}

interface Outcome {
  status: number;
  retryAfter: string | undefined;
  connection: string | undefined;
}

/**
 * One caller sending `body` on a connection of its own. node:http reads an answer that comes while
 * the body is still being sent, as a browser or an SDK does; an error once answered (the server
 * closed the connection on the rest of the body) is the expected end of such a request.
 */
function post(url: string, body: Buffer): { answered: Promise<Outcome>; cancel(): void } {
  const req = httpRequest(url, { method: "POST", agent: false, headers: { "content-type": "application/json", "content-length": body.length } });
  const answered = new Promise<Outcome>((resolve, reject) => {
    req.once("response", (res) => {
      res.resume();
      res.on("error", () => undefined);
      resolve({ status: res.statusCode!, retryAfter: res.headers["retry-after"], connection: res.headers.connection });
    });
    req.on("error", reject);
  });
  answered.catch(() => undefined);
  req.end(body);
  return { answered, cancel: () => req.destroy() };
}

/** A request whose body is sent by the test, part by part (never ended here), with the caller's token. */
function upload(url: string, headers: Record<string, string>) {
  const req = httpRequest(url, { method: "POST", agent: false, headers: { authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json", ...headers } });
  req.on("error", () => undefined);
  req.flushHeaders();
  const answered = new Promise<Outcome>((resolve) =>
    req.once("response", (res) => {
      res.resume();
      resolve({ status: res.statusCode!, retryAfter: res.headers["retry-after"], connection: res.headers.connection });
    }),
  );
  // The body is never ended: only the server's close ends the connection.
  const closed = new Promise((resolve) => req.once("close", resolve));
  return { req, answered, closed };
}

describe("the bytes the endpoint proxy keeps, in one service process", () => {
  it(`holds what fits of ${FLOOD} concurrent 1 MiB requests, refuses the rest 503 with Retry-After from their headers, and stays under 400 MB resident`, async () => {
    service = await spawnService({
      DATABASE_URL: db.url,
      ELASTICSEARCH_URL: elasticsearchUrl(),
      INDEX_LIVE: "false",
      NODE_OPTIONS: "--max-old-space-size=256",
      SIM_CREATING_MS: "3600000",
      GPU_ENDPOINT_HOLD_MS: String(HOLD_MS),
    });
    const pid = service.child.pid!;
    await createEndpoint(service.url, { name: "flood", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const before = memoryBytes(pid, "VmRSS");

    const chat = (n: number) => JSON.stringify({ messages: [{ role: "user", content: "x".repeat(n) }] });
    const body = Buffer.from(chat(BODY_BYTES - chat(0).length));
    expect(body.length).toBe(BODY_BYTES);
    const callers = Array.from({ length: FLOOD }, () => post(`${service!.url}/endpoints/flood/v1/chat/completions`, body));
    const outcomes: Outcome[] = [];
    for (const caller of callers) void caller.answered.then((o) => outcomes.push(o), () => undefined);
    // The refused are answered at once (the time a busy machine takes to open 600 connections);
    // the held wait for the replica, HOLD_MS.
    await waitFor(() => outcomes.length === FLOOD - FITS, `${FLOOD - FITS} answered`, HOLD_MS / 2);
    await waitFor(async () => sample(await metricsText(service!.url), "gpu_endpoint_kept_body_bytes") === FITS * BODY_BYTES, `${FITS} bodies kept`, 30_000);
    // The held ones are the endpoint's load, as the controller sees it (published every second).
    await waitFor(async () => sample(await metricsText(service!.url), 'gpu_endpoint_held{endpoint="flood"}') === FITS, `${FITS} held`, 30_000);
    const peak = memoryBytes(pid, "VmHWM");
    const figures = `RSS ${Math.round(before / MiB)} MiB before the flood, peak ${Math.round(peak / MiB)} MiB (VmHWM)`;
    console.log(`flood of ${FLOOD} x 1 MiB: ${figures}`);

    for (const outcome of outcomes) expect(outcome).toEqual({ status: 503, retryAfter: "10", connection: "close" });
    const text = await metricsText(service.url);
    expect(sample(text, 'gpu_endpoint_refused_total{endpoint="flood",reason="kept_bytes"}')).toBe(FLOOD - FITS);
    expect(peak, figures).toBeLessThan(PEAK_RSS_BOUND);

    // The held callers leave: nothing stays kept.
    for (const caller of callers) caller.cancel();
    await waitFor(async () => sample(await metricsText(service!.url), "gpu_endpoint_kept_body_bytes") === 0, "nothing kept", 10_000);
    expect(outcomes.length).toBe(FLOOD - FITS);
  }, 180_000);
});

describe("the count of kept bytes, in the proxy", () => {
  const chat = { model: MODEL, messages: [{ role: "user", content: "x".repeat(1_900) }], max_tokens: 1 };
  const size = Buffer.byteLength(JSON.stringify(chat));
  const FITS_IN_PROXY = 4;

  async function proxyKeeping(): Promise<ProxyUnderTest> {
    const proxy = await startProxy({ keptBodyBytes: FITS_IN_PROXY * size, hold: { ms: 1_000, max: 100 } });
    closing.push(() => proxy.close());
    for (const name of ["cold", "gone", "slow", "full"]) {
      proxy.endpoints.set(name, []);
      proxy.coming.set(name, { coming: true });
    }
    return proxy;
  }

  async function replica(id: string, status = 200) {
    const started = await recordingReplica(id, status);
    closing.push(() => new Promise((resolve) => started.server.close(resolve)));
    return started;
  }

  const kept = (proxy: ProxyUnderTest, bytes: number) => waitFor(() => proxy.kept.bytes === bytes, `${bytes} bytes kept`, 5_000);

  it("returns to zero once held requests are answered, time out, or their callers leave", async () => {
    const proxy = await proxyKeeping();
    // Answered: held, then sent to the replica that became ready.
    const answers = [callEndpoint(proxy, "/endpoints/cold/v1/chat/completions", chat), callEndpoint(proxy, "/endpoints/cold/v1/chat/completions", chat)];
    await kept(proxy, 2 * size);
    const ready = await replica("gpu-ready");
    proxy.endpoints.set("cold", [ready.target]);
    expect((await Promise.all(answers)).map((res) => res.status)).toEqual([200, 200]);
    expect(ready.bodies).toEqual([size, size]);
    await kept(proxy, 0);

    // The caller left while held.
    const caller = new AbortController();
    const leaving = callEndpoint(proxy, "/endpoints/gone/v1/chat/completions", chat, { signal: caller.signal });
    await kept(proxy, size);
    caller.abort();
    await expect(leaving).rejects.toThrow();
    await kept(proxy, 0);

    // Held past GPU_ENDPOINT_HOLD_MS.
    expect((await callEndpoint(proxy, "/endpoints/slow/v1/chat/completions", chat)).status).toBe(503);
    expect(proxy.kept.bytes).toBe(0);
  });

  it("refuses from its headers a body declared past what is left, and a chunked one as it crosses the bound: neither read further, their connections closed", async () => {
    const proxy = await startProxy({ keptBodyBytes: FITS_IN_PROXY * size, hold: { ms: 30_000, max: 100 } });
    closing.push(() => proxy.close());
    proxy.endpoints.set("half", []);
    proxy.coming.set("half", { coming: true });
    const path = "/endpoints/half/v1/chat/completions";
    const holders = [new AbortController(), new AbortController()];
    const held = holders.map((caller) => callEndpoint(proxy, path, chat, { signal: caller.signal }).catch(() => undefined));
    await kept(proxy, 2 * size);

    // Declared past what is left: answered before a byte of it is sent, and the connection closed.
    const declared = upload(proxy.url + path, { "content-length": String(3 * size) });
    expect(await declared.answered).toEqual({ status: 503, retryAfter: "10", connection: "close" });
    await declared.closed;
    expect(proxy.kept.bytes).toBe(2 * size);

    // Chunked: held while it fits, answered as it crosses the bound; the rest is never sent.
    const chunked = upload(proxy.url + path, { "transfer-encoding": "chunked" });
    chunked.req.write(Buffer.alloc(size, " "));
    await kept(proxy, 3 * size);
    chunked.req.write(Buffer.alloc(2 * size, " "));
    expect(await chunked.answered).toEqual({ status: 503, retryAfter: "10", connection: "close" });
    await chunked.closed;
    await kept(proxy, 2 * size);
    expect(await metricValue(proxy, "gpu_endpoint_refused_total", 'endpoint="half",reason="kept_bytes"')).toBe(2);

    for (const caller of holders) caller.abort();
    await Promise.all(held);
    await kept(proxy, 0);
  });

  it("leaves a refused connection half-open, unread, so that a caller slow to read still reads its 503 (no reset takes it)", async () => {
    const proxy = await startProxy({ keptBodyBytes: 1_000, hold: { ms: 30_000, max: 100 } });
    closing.push(() => proxy.close());
    proxy.endpoints.set("slow-reader", []);
    proxy.coming.set("slow-reader", { coming: true });
    // Callers that send most of a body past the bound and read nothing for 300 ms.
    const answers = await Promise.all(Array.from({ length: 5 }, () => callReadingLate(proxy, "/endpoints/slow-reader/v1/chat/completions", 800_000, 900_000)));
    for (const answer of answers) expect(answer).toMatch(/^HTTP\/1\.1 503 Service Unavailable\r\n[^]*connection: close/i);
    expect(proxy.kept.bytes).toBe(0);
  });

  it("refuses a request that would be held 503 at once past the bound, and sends one to a ready replica without a copy (no retry)", async () => {
    const proxy = await proxyKeeping();
    const holders = Array.from({ length: FITS_IN_PROXY }, () => new AbortController());
    const held = holders.map((caller) => callEndpoint(proxy, "/endpoints/full/v1/chat/completions", chat, { signal: caller.signal }).catch(() => undefined));
    await kept(proxy, FITS_IN_PROXY * size);

    const started = Date.now();
    const refused = await callEndpoint(proxy, "/endpoints/cold/v1/chat/completions", chat);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBeTruthy();
    expect(((await refused.json()) as { detail: string }).detail).toMatch(/GPU_ENDPOINT_KEPT_BODY_BYTES/);
    expect(Date.now() - started).toBeLessThan(500);
    expect(await metricValue(proxy, "gpu_endpoint_refused_total", 'endpoint="cold",reason="kept_bytes"')).toBe(1);

    // Two ready replicas that both answer 503: with no copy kept the first one's answer is passed
    // on (a retry would need the body again), and the whole body still reached it.
    const busy = [await replica("gpu-busy-1", 503), await replica("gpu-busy-2", 503)];
    proxy.endpoints.set("ready", busy.map((r) => r.target));
    expect((await callEndpoint(proxy, "/endpoints/ready/v1/chat/completions", chat)).status).toBe(503);
    expect(busy.flatMap((r) => r.bodies)).toEqual([size]);
    expect(await metricValue(proxy, "gpu_endpoint_retries_total", 'endpoint="ready"')).toBe(0);

    for (const caller of holders) caller.abort();
    await Promise.all(held);
    await kept(proxy, 0);
  });
});
