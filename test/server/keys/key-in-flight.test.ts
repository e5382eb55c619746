import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FAST_ENDPOINT_ENV } from "../../gpu/endpoints/helpers.js";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { serviceGroup, type ServiceProcess } from "../../support/spawn-service.js";
import { waitFor } from "../../support/wait.js";

// A key's in_flight (SPEC.md section 2, "Keys for callers"): its answers in flight over every
// process. Two service processes on one database; streamed answers from the simulated model
// server (a token every 20 ms) are in flight for seconds. Each process's share reaches the other's
// reads through the load rows it publishes about once a second: seen within 2 s, and gone within
// 2 s of the answers' end (times printed for docs/keys.md).

const SEEN_WITHIN_MS = 2_000;

let db: TestDatabase;
let a: ServiceProcess;
let b: ServiceProcess;

const services = serviceGroup(() => ({
  ...FAST_ENDPOINT_ENV,
  DATABASE_URL: db.url,
  ELASTICSEARCH_URL: elasticsearchUrl(),
  INDEX_LIVE: "false",
  SIM_CREATING_MS: "100",
  SIM_LOADING_MS: "100",
  SIM_MODEL_SERVER_START_MS: "100",
}));

beforeAll(async () => {
  db = await createTestDatabase();
  [a, b] = await Promise.all([services.start(), services.start()]);
}, 120_000);

afterAll(async () => {
  await services.stopAll();
  await db?.drop();
});

async function post(url: string, path: string, body: unknown, secret?: string): Promise<Response> {
  return fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(secret === undefined ? {} : { authorization: `Bearer ${secret}` }) },
    body: JSON.stringify(body),
  });
}

interface KeyJson {
  name: string;
  in_flight?: number;
}

/** The key's in_flight as one process reads it: GET /api/gpu/keys/{name}, or its entry in GET /api/gpu/keys. */
async function inFlight(service: ServiceProcess, name: string, read: "get" | "list"): Promise<number> {
  if (read === "get") return ((await (await fetch(`${service.url}/api/gpu/keys/${name}`)).json()) as KeyJson).in_flight ?? 0;
  const { keys } = (await (await fetch(`${service.url}/api/gpu/keys`)).json()) as { keys: KeyJson[] };
  return keys.find((key) => key.name === name)?.in_flight ?? 0;
}

/** Ms from `since` until `read` gives `expected`, at most 10 s. */
async function msUntil(read: () => Promise<number>, expected: number, since: number, what: string): Promise<number> {
  await waitFor(async () => (await read()) === expected, what, 10_000, 50);
  return Date.now() - since;
}

/** A streamed answer of `tokens` tokens begun at `service`, resolved once its first bytes came; `rest` reads it to its end. */
async function streamFrom(service: ServiceProcess, secret: string, tokens: number): Promise<{ rest: Promise<string> }> {
  const res = await post(service.url, "/endpoints/chat/v1/chat/completions", { messages: [{ role: "user", content: "count" }], max_tokens: tokens, stream: true }, secret);
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const first = await reader.read();
  expect(first.done).toBe(false);
  const rest = (async () => {
    let text = Buffer.from(first.value!).toString();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return text;
      text += Buffer.from(value).toString();
    }
  })();
  return { rest };
}

describe("a key's answers in flight", () => {
  it("shows a streamed answer at any process within 2 s, sums both processes' answers, and none once they end", async () => {
    expect((await post(a.url, "/api/gpu/endpoints", { name: "chat", template_name: "budget", replicas: 1, max_cost_per_hour: 5 })).status).toBe(200);
    const created = await post(a.url, "/api/gpu/keys", { name: "flying", max_parallel_requests: 4 });
    const secret = ((await created.json()) as { key: string }).key;
    expect(await inFlight(a, "flying", "get")).toBe(0);
    for (const service of [a, b]) {
      await waitFor(async () => {
        const res = await fetch(`${service.url}/endpoints/chat/v1/models`, { headers: { authorization: `Bearer ${secret}` } });
        await res.arrayBuffer();
        return res.status === 200;
      }, "the endpoint ready with the key", 30_000);
    }
    // The models calls have ended: nothing of theirs stays counted.
    await msUntil(() => inFlight(b, "flying", "get"), 0, Date.now(), "the models calls gone");

    // 400 tokens, 20 ms apart: about 8 s in flight.
    const atA = await streamFrom(a, secret, 400);
    let since = Date.now();
    const seenAtB = await msUntil(() => inFlight(b, "flying", "get"), 1, since, "the answer at a counted in b's read");
    const atB = await streamFrom(b, secret, 400);
    since = Date.now();
    const summed = await msUntil(() => inFlight(a, "flying", "list"), 2, since, "both answers counted in a's list");
    expect(await inFlight(b, "flying", "get")).toBe(2);

    const texts = await Promise.all([atA.rest, atB.rest]);
    for (const text of texts) expect(text).toContain("[DONE]");
    since = Date.now();
    const goneAtA = await msUntil(() => inFlight(a, "flying", "get"), 0, since, "no answer counted once both ended");
    expect(await inFlight(b, "flying", "list")).toBe(0);
    console.log(`key in_flight: an answer at process A seen by B after ${seenAtB} ms; A and B summed after ${summed} ms; back to 0 after ${goneAtA} ms`);
    for (const ms of [seenAtB, summed, goneAtA]) expect(ms).toBeLessThan(SEEN_WITHIN_MS);
  });
});
