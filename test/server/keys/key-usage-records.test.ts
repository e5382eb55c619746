import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rest, waitFor } from "../../gpu/helpers.js";
import { createEndpoint, startSimulatedService, waitForEndpoint, type SimulatedService } from "../../gpu/endpoints/helpers.js";

// A key's usage recorded as its answers come (SPEC.md section 2, "Keys for callers", Records):
// each answer's tokens as the replica counted them, written with the process's traffic about once
// a second, priced at the endpoint's token_price, and read back by the usage route.

let svc: SimulatedService;

beforeAll(async () => {
  svc = await startSimulatedService();
});

afterAll(async () => {
  await svc?.close();
});

interface UsagePoint {
  requests: string | number;
  prompt_tokens: string | number;
  completion_tokens: string | number;
  spend: number;
}

describe("a key's usage", () => {
  it("is recorded per minute with its tokens and its spend at the endpoint's price", async () => {
    await createEndpoint(svc.server.url, {
      name: "priced",
      template_name: "budget",
      replicas: 1,
      max_cost_per_hour: 5,
      token_price: { input_per_mtok: 2, output_per_mtok: 10 },
    });
    await waitForEndpoint(svc.server.url, "priced", "ready", (e) => e.ready_replicas === 1, 30_000);
    const created = await rest(svc.server.url, "POST", "/api/gpu/keys", { name: "team-a", endpoints: ["priced"] });
    expect(created.status).toBe(200);
    expect((created.body as { last_used_at?: string }).last_used_at).toBeUndefined();
    const firstSent = Date.now();
    const secret = (created.body as { key: string }).key;

    let prompt = 0;
    let completion = 0;
    for (const stream of [false, true]) {
      const res = await waitFor("the key is known to the proxy", async () => {
        const answer = await fetch(`${svc.server.url}/endpoints/priced/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
          body: JSON.stringify({ messages: [{ role: "user", content: "count my tokens" }], max_tokens: 7, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
        });
        return answer.status === 401 ? undefined : answer;
      }, 3000);
      expect(res.status).toBe(200);
      const text = await res.text();
      const usage = (stream ? JSON.parse(text.split("\n\n").filter((e) => e.includes('"usage":{')).at(-1)!.slice(6)) : JSON.parse(text)).usage;
      prompt += usage.prompt_tokens;
      completion += usage.completion_tokens;
    }
    expect(completion).toBe(14);

    const points = await waitFor("the minutes written", async () => {
      const read = await rest(svc.server.url, "GET", "/api/gpu/keys/team-a/usage?window=1h");
      const found = (read.body as { points: UsagePoint[] }).points;
      return found.reduce((n, p) => n + Number(p.requests), 0) === 2 ? found : undefined;
    }, 5000);
    const sum = (field: keyof UsagePoint) => points.reduce((n, p) => n + Number(p[field]), 0);
    expect([sum("prompt_tokens"), sum("completion_tokens")]).toEqual([prompt, completion]);
    // $2 per million prompt tokens and $10 per million completion tokens.
    expect(sum("spend")).toBeCloseTo((prompt * 2 + completion * 10) / 1e6, 9);
    // The key's last use is its last answer's end, written with the minutes.
    const lastUsed = Date.parse(((await rest(svc.server.url, "GET", "/api/gpu/keys/team-a")).body as { last_used_at: string }).last_used_at);
    expect(lastUsed).toBeGreaterThanOrEqual(firstSent);
    expect(lastUsed).toBeLessThanOrEqual(Date.now());
    const rows = await svc.db.knex("gpu_key_usage_minutes").where({ key_name: "team-a" });
    expect(rows.map((r: { endpoint_name: string }) => r.endpoint_name)).toEqual(["priced"]);
  });
});
