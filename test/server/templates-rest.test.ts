import { describe, expect, it } from "vitest";
import { useTestServer } from "../support/server.js";

const EXPECTED_TEMPLATES = [
  ["high_performance", "Qwen/Qwen2.5-Coder-32B-Instruct", 8192, 24, 2.0],
  ["budget", "Qwen/Qwen2.5-Coder-7B-Instruct", 4096, 8, 0.5],
  ["research", "Qwen/Qwen2.5-Coder-14B-Instruct", 8192, 16, 1.0],
] as const;

const t = useTestServer();

async function get(path: string, init?: RequestInit) {
  const res = await fetch(`${t.server.url}${path}`, init);
  return { status: res.status, type: res.headers.get("content-type"), body: (await res.json()) as Record<string, unknown> };
}

describe("GET /api/gpu/templates", () => {
  it("lists the three templates in contract order with snake_case config keys", async () => {
    const { status, type, body } = await get("/api/gpu/templates");
    expect(status).toBe(200);
    expect(type).toMatch(/^application\/json/);
    const templates = body.templates as Array<{ name: string; config: Record<string, unknown> }>;
    expect(templates.map((t) => t.name)).toEqual(["high_performance", "budget", "research"]);
    for (const [i, [name, model, maxLen, minRam, maxPrice]] of EXPECTED_TEMPLATES.entries()) {
      expect(templates[i]).toMatchObject({
        name,
        config: { llm_model_name: model, llm_max_model_len: maxLen, min_gpu_ram: minRam, max_price: maxPrice },
      });
    }
  });
});

describe("GET /api/gpu/templates/{template_name}", () => {
  it("answers one template as {name, config}", async () => {
    const { status, body } = await get("/api/gpu/templates/research");
    expect(status).toBe(200);
    expect(Object.keys(body).sort()).toEqual(["config", "name"]);
    expect(body.config).toMatchObject({
      llm_model_name: "Qwen/Qwen2.5-Coder-14B-Instruct",
      llm_max_model_len: 8192,
      min_gpu_ram: 16,
      max_price: 1,
    });
  });

  it("answers 404 with a detail naming an unknown template", async () => {
    const { status, body } = await get("/api/gpu/templates/nope");
    expect(status).toBe(404);
    expect(body).toEqual({ detail: "Template 'nope' not found" });
  });

  it("decodes percent-encoded path parameters and rejects broken encodings with 400", async () => {
    expect((await get("/api/gpu/templates/bud%67et")).status).toBe(200);
    const broken = await get("/api/gpu/templates/%E0%A4%A");
    expect(broken.status).toBe(400);
    expect(broken.body.detail).toMatch(/template_name/);
  });
});

describe("REST transcoding errors", () => {
  it("answers a malformed JSON body with 400, not 500", async () => {
    const res = await get("/api/gpu/search-offers", { method: "POST", body: "{bad", headers: { "content-type": "application/json" } });
    expect(res.status).toBe(400);
    expect(res.body.detail).toMatch(/malformed JSON/);
  });

  it("answers a wrongly typed query parameter with 400 naming it", async () => {
    const res = await get("/api/gpu/offers?max_price=abc");
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ field: "max_price" });
    expect(res.body.detail).toMatch(/max_price/);
  });

  it("answers an unknown query parameter with 400 rather than ignoring it", async () => {
    const res = await get("/api/gpu/templates?colour=red");
    expect(res.status).toBe(400);
    expect(res.body.detail).toMatch(/unknown query parameter 'colour'/);
  });

  it("answers a wrong JSON type in the body with 400", async () => {
    const res = await get("/api/gpu/search-offers", { method: "POST", body: '{"limit":"many"}' });
    expect(res.status).toBe(400);
    expect(typeof res.body.detail).toBe("string");
  });

  it("answers a body larger than the limit with 413", async () => {
    const res = await get("/api/gpu/search-offers", { method: "POST", body: JSON.stringify({ gpu_name: "x".repeat(2 * 1024 * 1024) }) });
    expect(res.status).toBe(413);
    expect(res.body.detail).toMatch(/exceeds/);
  });

  it("answers an unknown path with 404 and a known path with the wrong verb with 405", async () => {
    const missing = await get("/api/search/v1/index/db/goods/cursor");
    expect(missing.status).toBe(404);
    expect(typeof missing.body.detail).toBe("string");
    const wrongVerb = await get("/api/gpu/templates", { method: "DELETE" });
    expect(wrongVerb.status).toBe(405);
  });
});

describe("health", () => {
  it("answers /healthz and /readyz with the database and search engine reachable", async () => {
    expect((await get("/healthz")).body).toEqual({ status: "ok" });
    const ready = await get("/readyz");
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({
      status: "ready",
      checks: { database: "ok", search_engine: "ok" },
      // Information, not a check: a process that does not lead is as ready.
      leadership: { leading: expect.any(Boolean), last_round_at: expect.toBeOneOf([null, expect.any(String)]) },
    });
  });
});
