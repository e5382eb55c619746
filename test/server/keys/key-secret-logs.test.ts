import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { captureLogLines } from "../../support/log-lines.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { waitFor } from "../../gpu/helpers.js";

// A key's secret is shown in the create and rotate answers and nowhere else: not in any log line,
// at the most verbose level, whatever the service does with it (created, rotated, presented on
// the endpoint routes, on the management API, refused, revoked).

const ADMIN = "admin-token-0123456789";

let db: TestDatabase;
let server: TestServer;
const { logger, lines } = captureLogLines("trace");

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { AUTH_TOKENS: ADMIN }, logger });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
});

async function call(method: string, path: string, token: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { key?: string } };
}

describe("a key's secret", () => {
  it("never reaches a log line", async () => {
    const secrets: string[] = [];
    const first = (await call("POST", "/api/gpu/keys", ADMIN, { name: "logged", endpoints: ["chat"] })).body.key!;
    secrets.push(first);
    await waitFor("the key admitted", async () => ((await call("GET", "/endpoints/chat/v1/models", first)).status === 404 ? true : undefined), 3000);
    await call("POST", "/endpoints/chat/v1/chat/completions", first, { messages: [{ role: "user", content: "hi" }] });
    await call("GET", "/endpoints/other/v1/models", first);
    await call("GET", "/api/gpu/keys", first);
    await call("POST", "/api/gpu/keys", first, { name: "by-a-key" });
    await call("GET", "/metrics", first);
    secrets.push((await call("POST", "/api/gpu/keys/logged/rotate", ADMIN, { grace_s: 30 })).body.key!);
    await call("POST", "/api/gpu/keys", ADMIN, { name: "Bad Name" });
    await call("DELETE", "/api/gpu/keys/logged", ADMIN);
    await waitFor("the key refused", async () => ((await call("GET", "/endpoints/chat/v1/models", first)).status === 401 ? true : undefined), 3000);

    expect(lines.length).toBeGreaterThan(0);
    const logged = JSON.stringify(lines);
    for (const secret of secrets) {
      expect(secret).toMatch(/^sk-/);
      // The random part, so that a secret cut or re-encoded on its way would be found too.
      expect(logged).not.toContain(secret.slice(3, 20));
      expect(logged).not.toContain(Buffer.from(secret).toString("base64").slice(0, 20));
    }
  });
});
