import { spawn } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
import { query, reachable, until } from "./support/embedded-postgres.js";
import { adminDatabaseUrl } from "./support/postgres.js";
import { startTestPostgres } from "./support/test-postgres.js";

// The PostgreSQL of a test run given no DATABASE_URL: the embedded server, started for the run,
// whose superuser the tests need, and which leaves nothing behind, an interrupted run included.

const root = join(import.meta.dirname, "..");

describe("the test run's own PostgreSQL", () => {
  it("is the server every test file connects to when the run started it", async () => {
    const dataDir = process.env.TEST_POSTGRES_DATA_DIR;
    expect(process.env.DATABASE_URL).toBeTruthy();
    // With DATABASE_URL given, the run uses that server and started none.
    if (dataDir === undefined) return;
    const { dir } = await query(adminDatabaseUrl(), "select current_setting('data_directory') as dir");
    expect(realpathSync(String(dir))).toBe(realpathSync(join(dataDir, "postgres")));
  });

  it("gives the superuser (databases created, sessions ended), and stop removes its DATA_DIR", async () => {
    const postgres = await startTestPostgres();
    try {
      expect(await query(postgres.url, "select rolsuper as super, rolcreatedb as createdb from pg_roles where rolname = current_user")).toEqual({ super: true, createdb: true });
      expect(existsSync(join(postgres.dataDir, "postgres", "PG_VERSION"))).toBe(true);
    } finally {
      await postgres.stop();
    }
    expect(existsSync(postgres.dataDir)).toBe(false);
    expect(await reachable(postgres.url)).toBe(false);
  }, 120_000);

  it.each(["SIGINT", "SIGTERM"] as const)("stops and leaves no DATA_DIR when the run is ended by %s", async (signal) => {
    const child = spawn(process.execPath, ["--import", "tsx", "test/support/test-postgres-run.ts"], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
    const { url, dataDir } = JSON.parse(await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once("line", resolve))) as {
      url: string;
      dataDir: string;
    };
    expect(await reachable(url)).toBe(true);
    child.kill(signal);
    expect(await until(async () => !(await reachable(url)), 15_000)).toBe(true);
    expect(await until(() => !existsSync(dataDir), 15_000)).toBe(true);
  }, 120_000);
});
