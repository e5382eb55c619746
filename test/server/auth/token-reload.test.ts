import { renameSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sha256Of } from "../../../src/server/auth/token-set.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { captureLogLines } from "../../support/log-lines.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { createTokenFile } from "../../support/token-file.js";

// AUTH_TOKENS_FILE is re-read when it changes (written in place or replaced, as editors do) and
// on SIGHUP (App.reloadTokens), without a restart; a bad file keeps the previous tokens and logs
// one error. AUTH_TOKENS tokens stay whatever the file says.

const reader = { name: "dashboard", secret: "dash-secret", scopes: ["gpu:read"] };
const writer = { name: "provisioner", secret: "prov-secret", scopes: ["gpu:read", "gpu:write"] };

let db: TestDatabase;
let server: TestServer;
let tokenFile: ReturnType<typeof createTokenFile>;
const logs = captureLogLines("info");

beforeAll(async () => {
  db = await createTestDatabase();
  tokenFile = createTokenFile([reader]);
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    env: { AUTH_TOKENS_FILE: tokenFile.path, AUTH_TOKENS: "env-token" },
    logger: logs.logger,
  });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
  tokenFile?.remove();
});

const statusWith = async (secret: string) =>
  (await fetch(`${server.url}/api/gpu/templates`, { headers: { authorization: `Bearer ${secret}` } })).status;

async function eventually(check: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error("the condition did not hold in time");
    await new Promise((r) => setTimeout(r, 25));
  }
}

const reloadErrors = () => logs.lines.filter((l) => l.msg === "AUTH_TOKENS_FILE reload failed: keeping the previous tokens");

describe("token file reload", () => {
  it("accepts a token added to the file, without a restart", async () => {
    expect(await statusWith(reader.secret)).toBe(200);
    expect(await statusWith(writer.secret)).toBe(401);
    tokenFile.write([reader, writer]);
    await eventually(async () => (await statusWith(writer.secret)) === 200);
    expect(logs.lines.some((l) => l.msg === "AUTH_TOKENS_FILE reloaded")).toBe(true);
  });

  it("refuses a token removed from a file replaced by rename, as editors save", async () => {
    writeFileSync(`${tokenFile.path}.tmp`, JSON.stringify({ tokens: [{ name: writer.name, sha256: sha256Of(writer.secret).toString("hex"), scopes: writer.scopes }] }));
    renameSync(`${tokenFile.path}.tmp`, tokenFile.path);
    await eventually(async () => (await statusWith(reader.secret)) === 401);
    expect(await statusWith(writer.secret)).toBe(200);
  });

  it("keeps the previous tokens when the file turns bad, and logs one error", async () => {
    const errorsBefore = reloadErrors().length;
    tokenFile.writeText('{"tokens": [{"name": "x", "sha256": "not-a-digest", "scopes": ["gpu:read"]}]}');
    await eventually(async () => reloadErrors().length > errorsBefore);
    // More events for the same bad content (a touch, a SIGHUP) add no second error.
    tokenFile.writeText('{"tokens": [{"name": "x", "sha256": "not-a-digest", "scopes": ["gpu:read"]}]}');
    await server.app.reloadTokens();
    await new Promise((r) => setTimeout(r, 300));
    expect(reloadErrors().length).toBe(errorsBefore + 1);
    expect(reloadErrors().at(-1)!.detail).toMatch(/tokens\[0\]: sha256 must be/);
    expect(await statusWith(writer.secret)).toBe(200);
    expect(await statusWith(reader.secret)).toBe(401);
  });

  it("reloads on demand (SIGHUP) and never logs a secret", async () => {
    tokenFile.write([reader]);
    await server.app.reloadTokens();
    expect(await statusWith(reader.secret)).toBe(200);
    expect(await statusWith(writer.secret)).toBe(401);
    const text = JSON.stringify(logs.lines);
    expect(text).not.toContain(reader.secret);
    expect(text).not.toContain(writer.secret);
    expect(text).not.toContain("env-token");
  });

  it("keeps AUTH_TOKENS tokens whatever the file holds", async () => {
    tokenFile.write([]);
    await server.app.reloadTokens();
    expect(await statusWith(reader.secret)).toBe(401);
    expect(await statusWith("env-token")).toBe(200);
  });
});
