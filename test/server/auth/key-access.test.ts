import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { waitFor } from "../../gpu/helpers.js";

// What a key opens (SPEC.md section 2, "Keys for callers"): only /endpoints/{name}/v1/..., only
// the endpoints it lists (403 naming the endpoint), only priced endpoints when it has a budget;
// never the management API (401); unknown, revoked and expired keys 401, auth on or off. Static
// tokens keep working. The endpoints named here do not exist or are parked: a request the check
// lets through is answered 404 or 503 by the proxy, never 401 or 403.

const ADMIN = "admin-token-0123456789";

let db: TestDatabase;
let server: TestServer;
let open: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { AUTH_TOKENS: ADMIN } });
  open = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch() });
});

afterAll(async () => {
  await open?.close();
  await server?.close();
  await db?.drop();
});

async function call(base: string, method: string, path: string, token: string | undefined, body?: unknown) {
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as { detail?: string; key?: string } };
}

const admin = (method: string, path: string, body?: unknown) => call(server.url, method, path, ADMIN, body);

async function createKey(body: Record<string, unknown>): Promise<string> {
  const created = await admin("POST", "/api/gpu/keys", body);
  expect(created.status).toBe(200);
  return created.body.key!;
}

/** Waits until `path` answers the bearer of `token` with a status other than `not` (the directory polls), and returns it. */
async function statusOnceChanged(base: string, path: string, token: string, not: number) {
  return waitFor(`a status other than ${not}`, async () => {
    const res = await call(base, "GET", path, token);
    return res.status === not ? undefined : res;
  }, 3000);
}

describe("a key", () => {
  it("opens its own endpoints only, and never the management API", async () => {
    const secret = await createKey({ name: "app", endpoints: ["chat"] });
    const mine = await statusOnceChanged(server.url, "/endpoints/chat/v1/models", secret, 401);
    expect(mine.status).toBe(404);
    const other = await call(server.url, "GET", "/endpoints/code/v1/models", secret);
    expect(other.status).toBe(403);
    expect(other.body.detail).toContain("'code'");
    for (const path of ["/api/gpu/keys", "/api/gpu/endpoints", "/metrics", "/openapi.json", "/api/search/v1/status"]) {
      expect((await call(server.url, "GET", path, secret)).status, path).toBe(401);
    }
    const client = createClient(GpuService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    const err = await client.listKeys({}, { headers: { authorization: `Bearer ${secret}` } }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.Unauthenticated);
  });

  it("with endpoints empty opens every endpoint; a static token still opens endpoints and the API", async () => {
    const secret = await createKey({ name: "everywhere" });
    expect((await statusOnceChanged(server.url, "/endpoints/any-one/v1/models", secret, 401)).status).toBe(404);
    expect((await call(server.url, "GET", "/endpoints/any-one/v1/models", ADMIN)).status).toBe(404);
    expect((await admin("GET", "/api/gpu/keys")).status).toBe(200);
  });

  it("with a budget opens only endpoints with a token price", async () => {
    const endpoint = { template_name: "budget", replicas: 0, max_cost_per_hour: 1 };
    expect((await admin("POST", "/api/gpu/endpoints", { ...endpoint, name: "unpriced" })).status).toBe(200);
    expect((await admin("POST", "/api/gpu/endpoints", { ...endpoint, name: "priced", token_price: { input_per_mtok: 1, output_per_mtok: 2 } })).status).toBe(200);
    const secret = await createKey({ name: "budgeted", max_budget: 10 });
    // Parked: the proxy answers 503 once the check lets the request through.
    expect((await statusOnceChanged(server.url, "/endpoints/priced/v1/models", secret, 401)).status).toBe(503);
    const refused = await call(server.url, "GET", "/endpoints/unpriced/v1/models", secret);
    expect(refused.status).toBe(403);
    expect(refused.body.detail).toContain("'unpriced'");
    expect(refused.body.detail).toContain("token_price");
  });

  it("is refused once unknown, revoked or expired, auth on or off", async () => {
    const unknown = `sk-${"A".repeat(43)}`;
    expect((await call(server.url, "GET", "/endpoints/chat/v1/models", unknown)).status).toBe(401);
    expect((await call(open.url, "GET", "/endpoints/chat/v1/models", unknown)).status).toBe(401);
    // Auth off: no bearer still passes, a key is still held to its endpoints.
    expect((await call(open.url, "GET", "/endpoints/chat/v1/models", undefined)).status).toBe(404);
    const secret = await createKey({ name: "short-lived", endpoints: ["chat"] });
    expect((await statusOnceChanged(open.url, "/endpoints/chat/v1/models", secret, 401)).status).toBe(404);
    expect((await call(open.url, "GET", "/endpoints/code/v1/models", secret)).status).toBe(403);
    // The other process knows the key too before it expires (each directory polls on its own).
    expect((await statusOnceChanged(server.url, "/endpoints/chat/v1/models", secret, 401)).status).toBe(404);
    expect((await admin("PATCH", "/api/gpu/keys/short-lived", { expires_at: new Date(Date.now() + 1500).toISOString() })).status).toBe(200);
    const expired = await statusOnceChanged(server.url, "/endpoints/chat/v1/models", secret, 404);
    expect(expired.status).toBe(401);
    expect(expired.body.detail).toContain("expired");
    const revokedSecret = await createKey({ name: "revoked-soon" });
    await statusOnceChanged(server.url, "/endpoints/chat/v1/models", revokedSecret, 401);
    await admin("DELETE", "/api/gpu/keys/revoked-soon");
    expect((await statusOnceChanged(server.url, "/endpoints/chat/v1/models", revokedSecret, 404)).status).toBe(401);
    expect((await statusOnceChanged(open.url, "/endpoints/chat/v1/models", revokedSecret, 404)).status).toBe(401);
  });

  it("rotated keeps its old secret for the grace only", async () => {
    const first = await createKey({ name: "rotating" });
    await statusOnceChanged(server.url, "/endpoints/chat/v1/models", first, 401);
    const rotated = await admin("POST", "/api/gpu/keys/rotating/rotate", { grace_s: 60 });
    const second = rotated.body.key!;
    expect((await statusOnceChanged(server.url, "/endpoints/chat/v1/models", second, 401)).status).toBe(404);
    expect((await call(server.url, "GET", "/endpoints/chat/v1/models", first)).status).toBe(404);
    const third = (await admin("POST", "/api/gpu/keys/rotating/rotate", { grace_s: 0 })).body.key!;
    expect((await statusOnceChanged(server.url, "/endpoints/chat/v1/models", third, 401)).status).toBe(404);
    expect((await call(server.url, "GET", "/endpoints/chat/v1/models", second)).status).toBe(401);
    expect((await call(server.url, "GET", "/endpoints/chat/v1/models", first)).status).toBe(401);
  });
});
