import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RouteTarget } from "../../../src/module.js";
import { callEndpoint, metricValue, MODEL, recordingReplica as startRecordingReplica, startProxy, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { waitFor } from "../../support/wait.js";

// Holding (SPEC.md section 2, "Endpoints that follow their load"): a request that finds no ready
// replica while one is coming waits in the proxy, first in first out, bounded in time and count.
// Real sockets; the replicas are HTTP servers on loopback; the directory is a list.

const chat = { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1 };
const servers: Server[] = [];
const proxies: ProxyUnderTest[] = [];

/** A replica that answers at once and records the `x-seq` header of each request, in arrival order. */
async function recordingReplica(instanceId: string): Promise<{ target: RouteTarget; seen: string[] }> {
  const replica = await startRecordingReplica(instanceId);
  servers.push(replica.server);
  return replica;
}

/** The route to a replica whose machine is gone (its port closed), still listed as ready. */
async function goneReplica(instanceId: string): Promise<RouteTarget> {
  const { server, target } = await startRecordingReplica(instanceId);
  await new Promise((resolve) => server.close(resolve));
  return target;
}

/** A replica that fails every request before any answer byte: drops its connection, or answers `status`. */
async function failingReplica(instanceId: string, how: "drop" | number): Promise<{ target: RouteTarget; hits: () => number }> {
  let hits = 0;
  const server = createServer((req, res) => {
    hits += 1;
    req.resume();
    if (how === "drop") req.socket.destroy();
    else res.writeHead(how, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "going down" } }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push(server);
  const target = { instanceId, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null };
  return { target, hits: () => hits };
}

async function proxyWith(hold?: { ms: number; max: number }): Promise<ProxyUnderTest> {
  const proxy = await startProxy({ hold });
  proxies.push(proxy);
  return proxy;
}

/** The proxy's counts for one endpoint (zeros when it has none). */
function counts(proxy: ProxyUnderTest, name: string) {
  return proxy.load.entries(60_000).find((e) => e.endpointId === name) ?? { inFlight: 0, held: 0, byReplica: {}, byCaller: {} };
}

const heldCount = (proxy: ProxyUnderTest, name: string, n: number) => waitFor(() => counts(proxy, name).held === n, `${n} held for ${name}`, 5_000);

let proxy: ProxyUnderTest;

beforeAll(async () => {
  proxy = await proxyWith();
});

afterAll(async () => {
  for (const p of proxies) await p.close();
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

describe("holding in the endpoint proxy", () => {
  it("sends held requests, first in first out, to the first replica that becomes ready: no 503", async () => {
    proxy.endpoints.set("cold", []);
    proxy.coming.set("cold", { coming: true });
    const answers: Array<Promise<Response>> = [];
    for (const seq of ["1", "2", "3"]) {
      answers.push(callEndpoint(proxy, "/endpoints/cold/v1/chat/completions", chat, { headers: { "x-seq": seq } }));
      await heldCount(proxy, "cold", Number(seq));
    }
    const replica = await recordingReplica("gpu-cold");
    proxy.endpoints.set("cold", [replica.target]);
    const statuses = await Promise.all(answers.map(async (a) => (await a).status));
    expect(statuses).toEqual([200, 200, 200]);
    expect(replica.seen).toEqual(["1", "2", "3"]);
    expect(counts(proxy, "cold")).toMatchObject({ held: 0, inFlight: 0 });
    expect(await metricValue(proxy, "gpu_endpoint_hold_seconds_count", 'endpoint="cold"')).toBe(3);
  });

  it("answers 503 with Retry-After once a request has waited GPU_ENDPOINT_HOLD_MS", async () => {
    const short = await proxyWith({ ms: 300, max: 10 });
    short.endpoints.set("slow", []);
    short.coming.set("slow", { coming: true });
    const started = Date.now();
    const res = await callEndpoint(short, "/endpoints/slow/v1/chat/completions", chat);
    expect(res.status).toBe(503);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(((await res.json()) as { detail: string }).detail).toBe("no replica of endpoint 'slow' became ready within 300 ms");
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(counts(short, "slow").held).toBe(0);
  });

  it("answers 503 at once beyond GPU_ENDPOINT_HOLD_MAX, and ends the held ones when nothing is coming any more", async () => {
    const small = await proxyWith({ ms: 60_000, max: 2 });
    small.endpoints.set("busy", []);
    small.coming.set("busy", { coming: true });
    const held = [callEndpoint(small, "/endpoints/busy/v1/chat/completions", chat), callEndpoint(small, "/endpoints/busy/v1/chat/completions", chat)];
    await heldCount(small, "busy", 2);
    const started = Date.now();
    const third = await callEndpoint(small, "/endpoints/busy/v1/chat/completions", chat);
    expect(third.status).toBe(503);
    expect(third.headers.get("retry-after")).toBeTruthy();
    expect(((await third.json()) as { detail: string }).detail).toMatch(/2 requests already wait for one here/);
    expect(Date.now() - started).toBeLessThan(200);

    // Parked meanwhile (PATCH replicas 0): the held requests hear why at the next look.
    small.coming.set("busy", { coming: false, refusal: "parked" });
    for (const res of await Promise.all(held)) {
      expect(res.status).toBe(503);
      expect(((await res.json()) as { detail: string }).detail).toMatch(/parked/);
    }
    expect(counts(small, "busy").held).toBe(0);
  });

  it("drops a caller that leaves while held at once, leaving no count behind", async () => {
    proxy.endpoints.set("leaving", []);
    proxy.coming.set("leaving", { coming: true });
    const gone = new AbortController();
    const answer = callEndpoint(proxy, "/endpoints/leaving/v1/chat/completions", chat, { signal: gone.signal });
    await heldCount(proxy, "leaving", 1);
    gone.abort();
    await expect(answer).rejects.toThrow();
    await heldCount(proxy, "leaving", 0);
    expect(counts(proxy, "leaving")).toMatchObject({ held: 0, inFlight: 0, byReplica: {} });
    await waitFor(async () => (await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="leaving",code="499"')) === 1, "counted 499", 5_000);

    // A replica that becomes ready later gets nothing of it.
    const replica = await recordingReplica("gpu-leaving");
    proxy.endpoints.set("leaving", [replica.target]);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(replica.seen).toEqual([]);
  });

  it.each([
    ["parked", /is parked \(replicas 0\)/],
    ["deleting", /is being deleted/],
    ["budget", /budget \(max_cost_per_hour\) holds every launch back/],
  ] as const)("answers 503 at once when the endpoint is %s with nothing coming", async (refusal, detail) => {
    proxy.endpoints.set(refusal, []);
    proxy.coming.set(refusal, { coming: false, refusal });
    const started = Date.now();
    const res = await callEndpoint(proxy, `/endpoints/${refusal}/v1/chat/completions`, chat);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBeTruthy();
    expect(((await res.json()) as { detail: string }).detail).toMatch(detail);
    expect(Date.now() - started).toBeLessThan(200);
  });

  it("counts requests in flight per replica while they are answered", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const server = createServer((req, res) => {
      req.resume();
      void gate.then(() => res.end("{}"));
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    proxy.endpoints.set("counted", [{ instanceId: "gpu-slow", url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null }]);
    const answers = [callEndpoint(proxy, "/endpoints/counted/v1/chat/completions", chat), callEndpoint(proxy, "/endpoints/counted/v1/chat/completions", chat)];
    await waitFor(() => counts(proxy, "counted").inFlight === 2, "2 in flight", 5_000);
    expect(counts(proxy, "counted").byReplica).toEqual({ "gpu-slow": 2 });
    release();
    for (const res of await Promise.all(answers)) expect(res.status).toBe(200);
    await waitFor(() => counts(proxy, "counted").inFlight === 0, "none in flight", 5_000);
    expect(counts(proxy, "counted").byReplica).toEqual({});
  });

  it("counts a request in its caller's answers in flight once, from its hold to its answer's end; a refused one leaves none", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const server = createServer((req, res) => {
      req.resume();
      void gate.then(() => res.end("{}"));
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    // A proxy of its own: the shared one's replica choice takes turns, which later tests count on.
    const own = await proxyWith();
    own.endpoints.set("flying", []);
    own.coming.set("flying", { coming: true });
    const answer = callEndpoint(own, "/endpoints/flying/v1/chat/completions", chat);
    await heldCount(own, "flying", 1);
    expect(counts(own, "flying")).toMatchObject({ held: 1, inFlight: 0, byCaller: { "AUTH_TOKENS#1": 1 } });
    // Sent on from the hold queue: the same answer, not a second one.
    own.endpoints.set("flying", [{ instanceId: "gpu-flying", url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null }]);
    await waitFor(() => counts(own, "flying").inFlight === 1, "sent to the replica", 5_000);
    expect(counts(own, "flying")).toMatchObject({ held: 0, byCaller: { "AUTH_TOKENS#1": 1 } });
    release();
    expect((await answer).status).toBe(200);
    await waitFor(() => Object.keys(counts(own, "flying").byCaller).length === 0, "the answer's end counted", 5_000);

    const off = await proxyWith({ ms: 0, max: 10 });
    off.endpoints.set("flying", []);
    off.coming.set("flying", { coming: true });
    expect((await callEndpoint(off, "/endpoints/flying/v1/chat/completions", chat)).status).toBe(503);
    await waitFor(() => Object.keys(counts(off, "flying").byCaller).length === 0, "the refusal's count gone", 5_000);
  });

  it("answers held requests 503 promptly when the service stops", async () => {
    const stopping = await proxyWith({ ms: 60_000, max: 10 });
    stopping.endpoints.set("stop", []);
    stopping.coming.set("stop", { coming: true });
    const answer = callEndpoint(stopping, "/endpoints/stop/v1/chat/completions", chat);
    await heldCount(stopping, "stop", 1);
    const started = Date.now();
    const closed = stopping.close();
    const res = await answer;
    expect(res.status).toBe(503);
    expect(((await res.json()) as { detail: string }).detail).toBe("the service is stopping");
    await closed;
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it("holds a request whose replicas all refuse the connection while one is coming (preempted between two probes), then answers it from the next", async () => {
    // Two replicas whose machines are gone, still listed as ready: the first try and its one retry both fail.
    const gone = await Promise.all(["gpu-gone-1", "gpu-gone-2"].map(goneReplica));
    proxy.endpoints.set("preempted", gone);
    proxy.coming.set("preempted", { coming: true });
    const answer = callEndpoint(proxy, "/endpoints/preempted/v1/chat/completions", chat, { headers: { "x-seq": "7" } });
    await heldCount(proxy, "preempted", 1);
    // Still listed (the probes have not seen it yet): passed over, the request waits.
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(counts(proxy, "preempted").held).toBe(1);
    const next = await recordingReplica("gpu-next");
    proxy.endpoints.set("preempted", [...gone, next.target]);
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-next");
    expect(next.seen).toEqual(["7"]);
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="preempted",code="502"')).toBe(0);
    expect(await metricValue(proxy, "gpu_endpoint_hold_seconds_count", 'endpoint="preempted"')).toBe(1);
  });

  it("answers 502 naming the replica when a request's replicas cannot be reached and nothing is coming", async () => {
    proxy.endpoints.set("lost", [await goneReplica("gpu-lost")]);
    proxy.coming.set("lost", { coming: true });
    const answer = callEndpoint(proxy, "/endpoints/lost/v1/chat/completions", chat);
    await heldCount(proxy, "lost", 1);
    proxy.coming.set("lost", { coming: false, refusal: "parked" });
    const res = await answer;
    expect(res.status).toBe(502);
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-lost");
    expect(((await res.json()) as { detail: string }).detail).toBe("replica gpu-lost could not be reached");
  });

  it("counts a request's hold limit from when it was first held, when it comes back to the queue", async () => {
    const short = await proxyWith({ ms: 1_000, max: 10 });
    short.endpoints.set("clock", []);
    short.coming.set("clock", { coming: true });
    const started = Date.now();
    const answer = callEndpoint(short, "/endpoints/clock/v1/chat/completions", chat);
    await heldCount(short, "clock", 1);
    await new Promise((resolve) => setTimeout(resolve, 500));
    // Sent to a replica listed as ready whose machine is gone: back in the queue, with what is left of its 1 s.
    short.endpoints.set("clock", [await goneReplica("gpu-clock-gone")]);
    const res = await answer;
    expect(res.status).toBe(503);
    expect(((await res.json()) as { detail: string }).detail).toBe("no replica of endpoint 'clock' became ready within 1000 ms");
    expect(Date.now() - started).toBeLessThan(1_400);
    expect(await metricValue(short, "gpu_endpoint_hold_seconds_count", 'endpoint="clock"')).toBe(2);
  });

  it("retries a request whose replicas fail before their first byte on every other ready one, holds it while one is coming, and answers it from the one that comes", async () => {
    // Preempted machines as the proxy meets them: one whose port is closed, one that takes the
    // request and drops the connection, one that answers 503 (its model server going down).
    const gone = await goneReplica("gpu-churn-gone");
    const dropping = await failingReplica("gpu-churn-drop", "drop");
    const failing = await failingReplica("gpu-churn-503", 503);
    proxy.endpoints.set("churn", [gone, dropping.target]);
    proxy.coming.set("churn", { coming: true });
    const answer = callEndpoint(proxy, "/endpoints/churn/v1/chat/completions", chat, { headers: { "x-seq": "9" } });
    await heldCount(proxy, "churn", 1);
    expect(dropping.hits()).toBe(1);
    // Another replica becomes ready and fails too: back to the queue again, not 502.
    proxy.endpoints.set("churn", [gone, dropping.target, failing.target]);
    await waitFor(() => failing.hits() === 1, "sent to gpu-churn-503", 5_000);
    await heldCount(proxy, "churn", 1);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(counts(proxy, "churn").held).toBe(1);
    const next = await recordingReplica("gpu-churn-next");
    proxy.endpoints.set("churn", [gone, dropping.target, failing.target, next.target]);
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-churn-next");
    expect(next.seen).toEqual(["9"]);
    expect(counts(proxy, "churn")).toMatchObject({ held: 0, inFlight: 0 });
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="churn",code="502"')).toBe(0);
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="churn",code="200"')).toBe(1);
  });

  it("answers 502 at once when a request's replicas fail before their first byte and nothing is coming", async () => {
    const dropping = await failingReplica("gpu-alone-drop", "drop");
    proxy.endpoints.set("alone", [await goneReplica("gpu-alone-gone"), dropping.target]);
    proxy.coming.set("alone", { coming: false });
    const res = await callEndpoint(proxy, "/endpoints/alone/v1/chat/completions", chat);
    expect(res.status).toBe(502);
    expect(((await res.json()) as { detail: string }).detail).toMatch(/^replica gpu-alone-(gone|drop) could not be reached$/);
    expect(dropping.hits()).toBe(1);
    expect(await metricValue(proxy, "gpu_endpoint_hold_seconds_count", 'endpoint="alone"')).toBe(0);
  });
});
