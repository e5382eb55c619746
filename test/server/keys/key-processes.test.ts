import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { serviceGroup, type ServiceProcess } from "../../support/spawn-service.js";

// A key's changes across two service processes on one database (SPEC.md section 2, "Keys for
// callers"): a revocation and a PATCH of its endpoints made through one process are refused by
// both within 1 s. Each measures its time to refusal from the moment the change was answered
// (printed for docs/keys.md).

const ADMIN = "admin-token-0123456789";
const WITHIN_MS = 1000;

let db: TestDatabase;
let a: ServiceProcess;
let b: ServiceProcess;

const services = serviceGroup(() => ({
  DATABASE_URL: db.url,
  ELASTICSEARCH_URL: elasticsearchUrl(),
  INDEX_LIVE: "false",
  AUTH_TOKENS: ADMIN,
}));

beforeAll(async () => {
  db = await createTestDatabase();
  [a, b] = await Promise.all([services.start(), services.start()]);
}, 120_000);

afterAll(async () => {
  await services.stopAll();
  await db?.drop();
});

async function status(service: ServiceProcess, path: string, token: string): Promise<number> {
  const res = await fetch(`${service.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
  await res.arrayBuffer();
  return res.status;
}

async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: { key?: string } }> {
  const res = await fetch(`${a.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { key?: string } };
}

/** Ms from `since` until `service` answers `path` with `expected`, polling every 5 ms, at most 5 s. */
async function msUntil(service: ServiceProcess, path: string, token: string, expected: number, since: number): Promise<number> {
  while (Date.now() - since < 5000) {
    if ((await status(service, path, token)) === expected) return Date.now() - since;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`${path} never answered ${expected}`);
}

describe("a key across two processes", () => {
  it("is admitted by both once created, and refused by both within 1 s of its revocation", async () => {
    const created = await admin("POST", "/api/gpu/keys", { name: "shared", endpoints: ["chat"] });
    const secret = created.body.key!;
    const since = Date.now();
    // Admitted: the endpoint does not exist, so the proxy answers 404 past the check.
    const admitted = await Promise.all([a, b].map((s) => msUntil(s, "/endpoints/chat/v1/models", secret, 404, since)));
    expect(Math.max(...admitted)).toBeLessThan(WITHIN_MS);

    expect((await admin("DELETE", "/api/gpu/keys/shared")).status).toBe(200);
    const revokedAt = Date.now();
    const refused = await Promise.all([a, b].map((s) => msUntil(s, "/endpoints/chat/v1/models", secret, 401, revokedAt)));
    console.log(`key revocation: refused after ${refused[0]} ms in process A (the one revoking), ${refused[1]} ms in process B`);
    for (const ms of refused) expect(ms).toBeLessThan(WITHIN_MS);
    // Neither process logged the secret it was shown.
    expect(JSON.stringify([...a.logs, ...b.logs])).not.toContain(secret.slice(3));
  });

  it("refuses an endpoint taken from a key in both within 1 s of the PATCH", async () => {
    const secret = (await admin("POST", "/api/gpu/keys", { name: "narrowed", endpoints: ["chat", "code"] })).body.key!;
    const since = Date.now();
    await Promise.all([a, b].map((s) => msUntil(s, "/endpoints/code/v1/models", secret, 404, since)));

    expect((await admin("PATCH", "/api/gpu/keys/narrowed", { endpoints: ["chat"] })).status).toBe(200);
    const patchedAt = Date.now();
    const refused = await Promise.all([a, b].map((s) => msUntil(s, "/endpoints/code/v1/models", secret, 403, patchedAt)));
    console.log(`key PATCH of endpoints: refused after ${refused[0]} ms in process A (the one patching), ${refused[1]} ms in process B`);
    for (const ms of refused) expect(ms).toBeLessThan(WITHIN_MS);
    // Its other endpoint stays open.
    for (const s of [a, b]) expect(await status(s, "/endpoints/chat/v1/models", secret)).toBe(404);
  });
});
