import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FAST_ENDPOINT_ENV } from "../../gpu/endpoints/helpers.js";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { serviceGroup, type ServiceProcess } from "../../support/spawn-service.js";
import { waitFor } from "../../support/wait.js";

// A key's tpm_limit held across two service processes on one database (docs/keys.md, "In the
// proxy"): callers on both at once are admitted no more tokens in sum than the limit, and the rest
// are refused 429 tpm_limit.

const TPM = 300;

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

describe("a key's tpm_limit across two processes", () => {
  it("never admits more tokens in sum than the limit", async () => {
    expect((await post(a.url, "/api/gpu/endpoints", { name: "chat", template_name: "budget", replicas: 1, max_cost_per_hour: 5 })).status).toBe(200);
    const created = await post(a.url, "/api/gpu/keys", { name: "shared", tpm_limit: TPM });
    const secret = ((await created.json()) as { key: string }).key;
    // Both route to the replica with the key: the models route holds no tokens.
    for (const service of [a, b]) {
      await waitFor(async () => {
        const res = await fetch(`${service.url}/endpoints/chat/v1/models`, { headers: { authorization: `Bearer ${secret}` } });
        await res.arrayBuffer();
        return res.status === 200;
      }, "the endpoint ready with the key", 30_000);
    }

    // Each asks 7 completion tokens and its body's bytes / 4, which is what the replica counts as its prompt.
    const calls = Array.from({ length: 40 }, (_, i) =>
      post((i % 2 === 0 ? a : b).url, "/endpoints/chat/v1/chat/completions", { messages: [{ role: "user", content: `question ${i}` }], max_tokens: 7 }, secret).then(
        async (res) => ({ status: res.status, body: (await res.json()) as { usage?: { total_tokens: number }; error?: { code: string } } }),
      ),
    );
    const answers = await Promise.all(calls);
    const served = answers.filter((x) => x.status === 200);
    const refused = answers.filter((x) => x.status === 429);
    const used = served.reduce((n, x) => n + x.body.usage!.total_tokens, 0);
    console.log(`two processes against tpm_limit ${TPM}: ${served.length} answered using ${used} tokens, ${refused.length} refused`);
    expect(served.length + refused.length).toBe(answers.length);
    expect(served.length).toBeGreaterThan(0);
    expect(used).toBeLessThanOrEqual(TPM);
    expect(refused.every((x) => x.body.error?.code === "tpm_limit")).toBe(true);
  });
});
