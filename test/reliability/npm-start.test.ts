import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { elasticsearchUrl } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";

// `npm start` as a container runtime or a process manager runs it: SIGTERM goes to npm's pid
// only. The service must stop with it (one process tree), not keep serving as an orphan. It also
// proves the build runs: `npm start` compiles to dist/ and starts that, which must still find the
// project's files (package.json, the descriptor set behind /openapi.json).

const root = join(import.meta.dirname, "../..");
const { version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
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
      // The build comes first (a few seconds alone, more next to other test files).
      const timer = setTimeout(() => reject(new Error(`no 'listening' line in 120 s: ${logs.join("\n")}`)), 120_000);
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
    const openapi = await fetch(`${url}/openapi.json`);
    expect(openapi.status).toBe(200);
    const document = (await openapi.json()) as { info: { version: string }; paths: Record<string, unknown> };
    expect(document.info.version).toBe(version);
    expect(Object.keys(document.paths).length).toBeGreaterThan(10);

    npm.kill("SIGTERM");
    await exited;
    await outputClosed;
    // The service logged its clean shutdown, and nothing answers on its port any more.
    expect(logs.map((line) => (JSON.parse(line) as { msg?: string }).msg)).toContain("stopped");
    await expect(fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2_000) })).rejects.toThrow();
  }, 150_000);
});
