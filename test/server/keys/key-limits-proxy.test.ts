import OpenAI, { APIError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rest, waitFor } from "../../gpu/helpers.js";
import { createEndpoint, startSimulatedService, waitForEndpoint, type SimulatedService } from "../../gpu/endpoints/helpers.js";

// A key's limits in the proxy's request path (docs/keys.md, "In the proxy"): one admission before
// a replica is asked, a 429 in OpenAI's shape when a limit is reached, the x-ratelimit-* headers on
// every answer of a key with limits, and one settlement when the answer ends.

let svc: SimulatedService;
/** The model the endpoint serves, as its replicas name it. */
let model: string;

beforeAll(async () => {
  // A completion without max_tokens holds 4 tokens: a streamed answer soon runs past its hold.
  svc = await startSimulatedService({}, { GPU_KEY_HOLD_TOKENS: "4" });
  // Output tokens at $20,000 per million: 20,000 micro-dollars each, so that a budget spends in a few answers.
  await createEndpoint(svc.server.url, { name: "chat", template_name: "budget", replicas: 1, max_cost_per_hour: 5, token_price: { input_per_mtok: 0, output_per_mtok: 20_000 } });
  await waitForEndpoint(svc.server.url, "chat", "ready", (e) => e.ready_replicas === 1, 30_000);
  // Auth is off: the models route answers without a key.
  model = ((await (await fetch(`${svc.server.url}/endpoints/chat/v1/models`)).json()) as { data: Array<{ id: string }> }).data[0]!.id;
});

afterAll(async () => {
  await svc?.close();
});

async function createKey(body: Record<string, unknown>): Promise<string> {
  const created = await rest(svc.server.url, "POST", "/api/gpu/keys", { endpoints: ["chat"], ...body });
  expect(created.status).toBe(200);
  return (created.body as { key: string }).key;
}

const ask = (secret: string, fields: Record<string, unknown> = {}) =>
  fetch(`${svc.server.url}/endpoints/chat/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "hello" }], max_tokens: 7, ...fields }),
  });

/** The first answer once the key is known to the proxy (the directory polls every 250 ms). */
const firstAnswer = (secret: string, fields: Record<string, unknown> = {}) =>
  waitFor("the key is known to the proxy", async () => {
    const res = await ask(secret, fields);
    if (res.status !== 401) return res;
    await res.body?.cancel();
    return undefined;
  }, 3000);

interface ErrorBody {
  error: { message: string; type: string; code: string };
}

describe("a key's limits in the proxy", () => {
  it("refuses the request past rpm_limit with 429 rpm_limit, retry-after and the x-ratelimit figures", async () => {
    const secret = await createKey({ name: "rpm-three", rpm_limit: 3 });
    const first = await firstAnswer(secret);
    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-limit-requests")).toBe("3");
    expect(first.headers.get("x-ratelimit-remaining-requests")).toBe("2");
    await first.text();
    for (let i = 0; i < 2; i++) expect((await ask(secret).then(async (r) => (await r.text(), r))).status).toBe(200);

    const refused = await ask(secret);
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as ErrorBody;
    expect(body.error).toMatchObject({ type: "rate_limit_exceeded", code: "rpm_limit" });
    expect(body.error.message).toContain("rpm_limit");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.headers.get("x-ratelimit-limit-requests")).toBe("3");
    expect(refused.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    expect(refused.headers.get("x-ratelimit-reset-requests")).toMatch(/^(\d+m)?\d+s$|^\d+ms$/);

    // Counted as the key's refusal, and no replica answered it: three requests recorded.
    const points = await waitFor("the refusal recorded", async () => {
      const read = await rest(svc.server.url, "GET", "/api/gpu/keys/rpm-three/usage?window=1h");
      const found = (read.body as { points: Array<{ requests: string; refused: Record<string, string | number> }> }).points;
      return found.some((p) => Number(p.refused.rpm_limit) === 1) ? found : undefined;
    }, 5000);
    expect(points.reduce((n, p) => n + Number(p.requests), 0)).toBe(3);
  });

  it("refuses a second request in flight past max_parallel_requests 1, and admits one once the first ended", async () => {
    const secret = await createKey({ name: "one-at-a-time", max_parallel_requests: 1 });
    // About 60 tokens 20 ms apart: in flight for more than a second.
    const slow = await firstAnswer(secret, { stream: true, max_tokens: 60 });
    expect(slow.status).toBe(200);
    const reader = slow.body!.getReader();
    await reader.read();

    const second = await ask(secret);
    expect(second.status).toBe(429);
    expect(((await second.json()) as ErrorBody).error).toMatchObject({ type: "rate_limit_exceeded", code: "parallel_limit" });
    expect(second.headers.get("retry-after")).toBe("1");

    while (!(await reader.read()).done);
    const third = await ask(secret);
    expect(third.status).toBe(200);
    await third.text();
  });

  it("counts a request held for a replica in max_parallel_requests: another is refused at once, not held", async () => {
    const secret = await createKey({ name: "held-one", max_parallel_requests: 1, endpoints: [] });
    const known = await firstAnswer(secret);
    await known.text();
    await createEndpoint(svc.server.url, { name: "cold", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const call = () =>
      fetch(`${svc.server.url}/endpoints/cold/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hello" }], max_tokens: 3 }),
      });
    // No replica is ready yet: the first waits in the hold queue, holding the key's one place.
    const held = call();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const refused = await call();
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as ErrorBody).error.code).toBe("parallel_limit");
    const answered = await held;
    expect(answered.status).toBe(200);
    await answered.text();
    // Its place was given back when its answer ended.
    const next = await call();
    expect(next.status).toBe(200);
    await next.text();
  });

  it("gives a held request's place back when its caller leaves while it waits", async () => {
    const secret = await createKey({ name: "held-gone", max_parallel_requests: 1, endpoints: [] });
    const known = await firstAnswer(secret);
    await known.text();
    await createEndpoint(svc.server.url, { name: "cold-too", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const call = (signal?: AbortSignal) =>
      fetch(`${svc.server.url}/endpoints/cold-too/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hello" }], max_tokens: 3 }),
        signal,
      });
    const leaving = new AbortController();
    const gone = call(leaving.signal).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 50));
    leaving.abort();
    await gone;
    await new Promise((resolve) => setTimeout(resolve, 50));
    const next = await call();
    expect(next.status).toBe(200);
    await next.text();
  });

  it("refuses a spent budget with 429 insufficient_quota and x-should-retry false", async () => {
    // 7 completion tokens cost 140,000 micro-dollars: the second answer does not fit in $0.2.
    const secret = await createKey({ name: "spent", max_budget: 0.2, budget_duration: "1h" });
    const first = await firstAnswer(secret);
    expect(first.status).toBe(200);
    await first.text();

    const refused = await ask(secret);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as ErrorBody).error).toMatchObject({ type: "insufficient_quota", code: "budget_exceeded" });
    expect(refused.headers.get("x-should-retry")).toBe("false");
    // The next period starts within the hour.
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(Number(refused.headers.get("retry-after"))).toBeLessThanOrEqual(3600);
  });

  it("lets a streamed answer past its hold take more per event, and ends it with one error event when tpm_limit has no more", async () => {
    // No max_tokens: 16 tokens come, each event past the 4-token hold takes more.
    const roomy = await createKey({ name: "roomy", tpm_limit: 1000 });
    const whole = await (await firstAnswer(roomy, { stream: true, max_tokens: undefined })).text();
    expect(whole).toContain("data: [DONE]");

    // The body's bytes / 4 and the 4-token hold fit in 20; the answer's 16 tokens do not.
    const tight = await createKey({ name: "tight", tpm_limit: 20 });
    const res = await firstAnswer(tight, { stream: true, max_tokens: undefined });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain("[DONE]");
    const last = JSON.parse(text.trim().split("\n\n").at(-1)!.slice("data: ".length)) as ErrorBody;
    expect(last.error).toMatchObject({ type: "rate_limit_exceeded", code: "tpm_limit" });
  });

  it("lets the openai SDK retry a parallel_limit refusal after its retry-after, and succeed once the first answer ended", async () => {
    const secret = await createKey({ name: "sdk-parallel", max_parallel_requests: 1 });
    // About 40 tokens 20 ms apart: it ends within the SDK's first wait of retry-after (1 s).
    const slow = await firstAnswer(secret, { stream: true, max_tokens: 40 });
    const reader = slow.body!.getReader();
    await reader.read();
    const drained = (async () => {
      while (!(await reader.read()).done);
    })();
    const statuses: number[] = [];
    const counting: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      statuses.push(res.status);
      return res;
    };
    const client = new OpenAI({ baseURL: `${svc.server.url}/endpoints/chat/v1`, apiKey: secret, maxRetries: 2, fetch: counting });
    const completion = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    expect(completion.choices[0]!.message.content).toBeTruthy();
    expect(statuses[0]).toBe(429);
    expect(statuses.at(-1)).toBe(200);
    await drained;
  });

  it("makes the openai SDK raise at once for a spent budget: one request, APIError 429 budget_exceeded", async () => {
    const secret = await createKey({ name: "sdk-spent", max_budget: 0.2 });
    const first = await firstAnswer(secret);
    await first.text();
    let requests = 0;
    const counting: typeof fetch = (input, init) => {
      requests += 1;
      return fetch(input, init);
    };
    const client = new OpenAI({ baseURL: `${svc.server.url}/endpoints/chat/v1`, apiKey: secret, maxRetries: 2, fetch: counting });
    const error = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 7 }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(429);
    expect((error as APIError).code).toBe("budget_exceeded");
    expect(requests).toBe(1);
  });

  it("changes nothing for a key without limits: no x-ratelimit headers", async () => {
    const secret = await createKey({ name: "free" });
    const res = await firstAnswer(secret);
    expect(res.status).toBe(200);
    await res.text();
    expect([...res.headers.keys()].filter((h) => h.startsWith("x-ratelimit"))).toEqual([]);
  });
});
