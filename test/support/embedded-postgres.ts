import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import pg from "pg";

// What the embedded-postgres tests share: DATA_DIRs under the OS temp dir, other processes that
// run a DATA_DIR's server (test/support/embedded-owner.ts), and one-off queries.

const root = join(import.meta.dirname, "../..");

export interface EmbeddedFixtures {
  /** A fresh DATA_DIR, removed by cleanup(). */
  dataDir(): string;
  /** Another process that runs the embedded server of `dir`; resolves with the server's URL. */
  startOwner(dir: string, whenRunning?: "refuse" | "share"): Promise<{ child: ChildProcess; url: string }>;
  /** Kills the owners still running and removes the DATA_DIRs. */
  cleanup(): void;
}

export function embeddedFixtures(): EmbeddedFixtures {
  const dirs: string[] = [];
  const owners: ChildProcess[] = [];
  return {
    dataDir() {
      const dir = mkdtempSync(join(tmpdir(), "embedded-pg-"));
      dirs.push(dir);
      return dir;
    },
    async startOwner(dir, whenRunning = "refuse") {
      const child = spawn(process.execPath, ["--import", "tsx", "test/support/embedded-owner.ts", dir, whenRunning], {
        cwd: root,
        stdio: ["ignore", "pipe", "inherit"],
      });
      owners.push(child);
      const url = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once("line", resolve);
        child.once("exit", (code) => reject(new Error(`owner exited with ${code}`)));
      });
      return { child, url };
    },
    cleanup() {
      for (const owner of owners) owner.kill("SIGKILL");
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function queryRows(url: string, sql: string): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on("error", () => {});
  await client.connect();
  try {
    return (await client.query(sql)).rows as Record<string, unknown>[];
  } finally {
    await client.end();
  }
}

export async function query(url: string, sql: string): Promise<Record<string, unknown>> {
  return (await queryRows(url, sql))[0]!;
}

export async function reachable(url: string): Promise<boolean> {
  return query(url, "select 1").then(
    () => true,
    () => false,
  );
}

export async function until(condition: () => Promise<boolean> | boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await condition()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return condition();
}
