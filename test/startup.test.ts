import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "./support/postgres.js";

// Start-up refuses a configuration it cannot serve, naming what is wrong: an AUTH_TOKENS with no
// token or a bad AUTH_TOKENS_FILE, an unreachable DATABASE_URL (its password redacted), TLS files that cannot be read
// (checked before any migration touches the database).

const root = join(import.meta.dirname, "..");
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
});

afterAll(async () => {
  await db?.drop();
});

async function start(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, PORT: "0", LOG_LEVEL: "silent", CRON_ENABLED: "false", ...env };
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], { cwd: root, env: childEnv, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
  clearTimeout(timer);
  return { code, stderr };
}

describe("start-up", () => {
  it("exits 2 when AUTH_TOKENS is set but holds no token", async () => {
    const { code, stderr } = await start({ AUTH_TOKENS: " , ", DATABASE_URL: db.url });
    expect(code).toBe(2);
    expect(stderr).toMatch(/^configuration error: AUTH_TOKENS is set but holds no token/);
  }, 40_000);

  it("names an unreachable DATABASE_URL without its password", async () => {
    const { code, stderr } = await start({ DATABASE_URL: "postgres://app:s3cret@127.0.0.1:9/goods" });
    expect(code).toBe(1);
    expect(stderr).toMatch(/^start-up failed: DATABASE_URL \(postgres:\/\/app:\*\*\*@127\.0\.0\.1:9\/goods\) unreachable or not migratable: ECONNREFUSED/);
    expect(stderr).not.toContain("s3cret");
  }, 40_000);

  it("names an unreadable TLS file and runs no migration", async () => {
    const { code, stderr } = await start({ DATABASE_URL: db.url, TLS_CERT_FILE: "/nonexistent/cert.pem", TLS_KEY_FILE: "/nonexistent/key.pem" });
    expect(code).toBe(2);
    expect(stderr).toMatch(/^configuration error: TLS_CERT_FILE cannot be read: ENOENT/);
    const { rows } = await db.knex.raw<{ rows: unknown[] }>("select 1 from information_schema.tables where table_name = 'knex_migrations'");
    expect(rows).toEqual([]);
  }, 40_000);

  it("exits 2 naming AUTH_TOKENS_FILE when the token file is bad, and runs no migration", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tokens-"));
    try {
      const file = join(dir, "tokens.json");
      writeFileSync(file, JSON.stringify({ tokens: [{ name: "ci", sha256: "abc", scopes: ["gpu:read"] }] }));
      const bad = await start({ DATABASE_URL: db.url, AUTH_TOKENS_FILE: file });
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/^configuration error: AUTH_TOKENS_FILE tokens\[0\]: sha256 must be/);
      const missing = await start({ DATABASE_URL: db.url, AUTH_TOKENS_FILE: join(dir, "absent.json") });
      expect(missing.code).toBe(2);
      expect(missing.stderr).toMatch(/^configuration error: AUTH_TOKENS_FILE cannot be read: ENOENT/);
      const { rows } = await db.knex.raw<{ rows: unknown[] }>("select 1 from information_schema.tables where table_name = 'knex_migrations'");
      expect(rows).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
