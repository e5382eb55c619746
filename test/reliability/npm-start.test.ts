import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { elasticsearchUrl } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";

// `npm start` as a container runtime or a process manager runs it: SIGTERM goes to npm's pid
// only. The service must stop with it (one process tree), not keep serving as an orphan.

const root = join(import.meta.dirname, "../..");
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
});

afterAll(async () => {
  await db?.drop();
});

describe("npm start", () => {
  it("stops the service when npm gets SIGTERM", async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: "0", DATABASE_URL: db.url, ELASTICSEARCH_URL: elasticsearchUrl(), CRON_ENABLED: "false", LOG_LEVEL: "info" };
    delete env.AUTH_TOKENS;
    const npm = spawn("npm", ["start", "--silent"], { cwd: root, env, stdio: ["ignore", "pipe", "inherit"] });
    const exited = new Promise<number | null>((resolve) => npm.once("exit", (code) => resolve(code)));
    // Closes once every process holding npm's stdout is gone, the service included.
    const outputClosed = new Promise((resolve) => npm.stdout!.once("close", resolve));
    const logs: string[] = [];
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no 'listening' line in 60 s: ${logs.join("\n")}`)), 60_000);
      createInterface({ input: npm.stdout! }).on("line", (line) => {
        logs.push(line);
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === "listening" && entry.url) {
          clearTimeout(timer);
          resolve(entry.url);
        }
      });
    });
    expect((await fetch(`${url}/healthz`)).status).toBe(200);

    npm.kill("SIGTERM");
    await exited;
    await outputClosed;
    // The service logged its clean shutdown, and nothing answers on its port any more.
    expect(logs.map((line) => (JSON.parse(line) as { msg?: string }).msg)).toContain("stopped");
    await expect(fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2_000) })).rejects.toThrow();
  }, 90_000);
});
