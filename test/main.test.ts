import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, describe, expect, it } from "vitest";

// `npm start` on its embedded defaults: no DATABASE_URL (embedded PostgreSQL under DATA_DIR) and
// no reachable Elasticsearch. The GPU routes work, readiness says what is missing, SIGTERM stops
// the process cleanly, and the data survives a restart.

const root = join(import.meta.dirname, "..");
const dataDir = mkdtempSync(join(tmpdir(), "embedded-"));

afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

interface Started {
  child: ChildProcess;
  url: string;
  exited: Promise<number | null>;
}

async function startMain(): Promise<Started> {
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: "0", DATA_DIR: dataDir, ELASTICSEARCH_URL: "http://127.0.0.1:9", LOG_LEVEL: "info", CRON_ENABLED: "false" };
  delete env.DATABASE_URL;
  delete env.AUTH_TOKENS;
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no 'listening' log line in 90 s; stderr: ${stderr}`)), 90_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const entry = JSON.parse(line) as { msg?: string; url?: string };
      if (entry.msg === "listening" && entry.url) {
        clearTimeout(timer);
        resolve(entry.url);
      }
    });
    void exited.then((code) => reject(new Error(`exited with ${code} before listening; stderr: ${stderr}`)));
  });
  return { child, url, exited };
}

describe("the service on its embedded defaults", () => {
  it("serves the GPU API without a database server or Elasticsearch, and stops cleanly on SIGTERM", async () => {
    let createdId = "";
    const first = await startMain();
    try {
      const templates = await fetch(`${first.url}/api/gpu/templates`);
      expect(templates.status).toBe(200);
      expect(((await templates.json()) as { templates: unknown[] }).templates).toHaveLength(3);

      const ready = await fetch(`${first.url}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toMatchObject({ checks: { database: "ok", search_engine: "unreachable" } });

      const indexing = await fetch(`${first.url}/api/search/v1/index/db/goods?interval=1`);
      expect(indexing.status).toBe(503);
      expect(((await indexing.json()) as { detail: string }).detail).toMatch(/Elasticsearch/i);

      const created = await fetch(`${first.url}/api/gpu/instances/from-template?template_name=budget`, { method: "POST" });
      expect(created.status).toBe(200);
      createdId = ((await created.json()) as { instance_id: string }).instance_id;
    } finally {
      first.child.kill("SIGTERM");
    }
    expect(await first.exited).toBe(0);

    // The embedded database persists under DATA_DIR: a second start finds the instance.
    const second = await startMain();
    try {
      const list = await fetch(`${second.url}/api/gpu/instances`);
      const { instances } = (await list.json()) as { instances: Array<{ instance_id: string }> };
      expect(instances.map((i) => i.instance_id)).toContain(createdId);
      expect((await fetch(`${second.url}/api/gpu/instances/${createdId}`, { method: "DELETE" })).status).toBe(200);
    } finally {
      second.child.kill("SIGTERM");
    }
    expect(await second.exited).toBe(0);
  }, 240_000);
});
