import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEndpoint } from "../../gpu/endpoints/helpers.js";
import { callEndpoint, metricValue, MODEL, recordingReplica, startProxy, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { spawnService, type ServiceProcess } from "../../support/spawn-service.js";
import { waitFor } from "../../support/wait.js";

// The bytes the endpoint proxy keeps for holding and retries are bounded per process
// (GPU_ENDPOINT_KEPT_BODY_BYTES): a flood of large requests to an endpoint whose replica is still
// starting holds what fits and refuses the rest 503 at once, and the process's resident memory
// stays within the bound. The real service as a process, under the README's production heap
// setting, on loopback; its only replica stays `creating` for the whole test.

const KEPT_LIMIT = 16 * 1024 * 1024;
const BODY_BYTES = 1_000_000;
const FLOOD = 120;
const HOLD_MS = 60_000;
/** What fits: each held request keeps its whole (declared) body. */
const FITS = Math.floor(KEPT_LIMIT / BODY_BYTES);
/**
 * Resident memory the flood may add: what is kept, once more for the chunks of refused bodies
 * read and dropped meanwhile (garbage not yet collected), and 48 MiB of sockets and heap.
 */
const RSS_GROWTH_BOUND = 2 * KEPT_LIMIT + 48 * 1024 * 1024;

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

/** VmRSS of a process, bytes. */
function residentBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))!;
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
  status: number | "no answer";
  retryAfter: string | null;
  ms: number;
}

describe("the bytes the endpoint proxy keeps, in one service process", () => {
  it("holds what fits, refuses the rest 503 with Retry-After at once, and its memory stays bounded", async () => {
    service = await spawnService({
      DATABASE_URL: db.url,
      ELASTICSEARCH_URL: elasticsearchUrl(),
      INDEX_LIVE: "false",
      NODE_OPTIONS: "--max-old-space-size=256",
      SIM_CREATING_MS: "3600000",
      GPU_ENDPOINT_HOLD_MS: String(HOLD_MS),
      GPU_ENDPOINT_KEPT_BODY_BYTES: String(KEPT_LIMIT),
    });
    const pid = service.child.pid!;
    await createEndpoint(service.url, { name: "flood", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const baseline = residentBytes(pid);

    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, residentBytes(pid))), 20);
    const chat = (n: number) => JSON.stringify({ messages: [{ role: "user", content: "x".repeat(n) }] });
    const body = chat(BODY_BYTES - chat(0).length);
    const send = async (signal: AbortSignal): Promise<Outcome> => {
      const started = Date.now();
      try {
        const res = await fetch(`${service!.url}/endpoints/flood/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
          signal,
        });
        await res.arrayBuffer();
        return { status: res.status, retryAfter: res.headers.get("retry-after"), ms: Date.now() - started };
      } catch {
        return { status: "no answer", retryAfter: null, ms: Date.now() - started };
      }
    };

    // What fits is held (its replica is still being created): its bodies are kept.
    const holders = Array.from({ length: FITS }, () => new AbortController());
    const held = holders.map((caller) => send(caller.signal));
    await waitFor(async () => sample(await metricsText(service!.url), "gpu_endpoint_kept_body_bytes") === FITS * BODY_BYTES, `${FITS} bodies kept`, 10_000);
    // The rest of the flood finds no room: 503 at once (the time its 100 MB take to be sent and
    // dropped on a busy machine), where a held one would wait GPU_ENDPOINT_HOLD_MS.
    const refused = await Promise.all(Array.from({ length: FLOOD - FITS }, () => send(AbortSignal.timeout(HOLD_MS / 2))));
    await new Promise((resolve) => setTimeout(resolve, 500)); // garbage of the refused bodies collected, or not
    clearInterval(sampler);
    peak = Math.max(peak, residentBytes(pid));

    const figures = `RSS ${Math.round(baseline / 2 ** 20)} MiB before the flood, peak ${Math.round(peak / 2 ** 20)} MiB`;
    for (const outcome of refused) {
      expect(outcome.status).toBe(503);
      expect(outcome.retryAfter).toBeTruthy();
      expect(outcome.ms).toBeLessThan(HOLD_MS / 6);
    }
    const text = await metricsText(service.url);
    expect(sample(text, 'gpu_endpoint_refused_total{endpoint="flood",reason="kept_bytes"}')).toBe(FLOOD - FITS);
    expect(sample(text, "gpu_endpoint_kept_body_bytes")).toBe(FITS * BODY_BYTES);
    expect(peak - baseline, figures).toBeLessThan(RSS_GROWTH_BOUND);

    // The held callers leave: nothing stays kept.
    for (const caller of holders) caller.abort();
    expect((await Promise.all(held)).map((o) => o.status)).toEqual(holders.map(() => "no answer"));
    await waitFor(async () => sample(await metricsText(service!.url), "gpu_endpoint_kept_body_bytes") === 0, "nothing kept", 5_000);
  }, 90_000);
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
