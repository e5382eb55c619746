import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { elasticsearchUrl } from "./support/elasticsearch.js";
import { buildService, spawnService, type ServiceProcess } from "./support/spawn-service.js";

// The first hour of a newcomer, in seconds: the built service (as `npm start` runs it) on its
// embedded PostgreSQL, with the sync loop every second. It must lead and run the loop, enforce a
// limit, advance statuses in the list by itself, keep answering while an indexing run of sample
// data streams, survive a SIGKILL, and log no error on the way.

const root = join(import.meta.dirname, "..");
const buildDir = "dist/test-first-hour";
const dataDir = mkdtempSync(join(tmpdir(), "first-hour-"));
const run = promisify(execFile);

const env = {
  DATA_DIR: dataDir,
  ELASTICSEARCH_URL: elasticsearchUrl(),
  GOODS_INDEX: `first_hour_${process.pid}`,
  GPU_STATUS_SYNC_MS: "1000",
  SIM_CREATING_MS: "300",
  SIM_LOADING_MS: "300",
  SIM_MODEL_SERVER_START_MS: "300",
};
const start = () => spawnService(env, { fromBuild: true, buildDir, unset: ["DATABASE_URL"], timeoutMs: 90_000 });

let service: ServiceProcess;

beforeAll(() => buildService(buildDir));

afterAll(async () => {
  await service?.stop("SIGTERM");
  await fetch(`${elasticsearchUrl()}/${env.GOODS_INDEX}*`, { method: "DELETE" }).catch(() => {});
  rmSync(dataDir, { recursive: true, force: true });
});

interface Listed {
  instance_id: string;
  status: string;
}

async function json<T>(res: Response | Promise<Response>): Promise<{ status: number; body: T }> {
  const answer = await res;
  return { status: answer.status, body: (await answer.json()) as T };
}

const errorLines = (s: ServiceProcess) => s.logs.filter((entry) => Number(entry.level) >= 50);

async function listed(url: string): Promise<Map<string, string>> {
  const { status, body } = await json<{ instances: Listed[] }>(fetch(`${url}/api/gpu/instances?limit=100`));
  expect(status).toBe(200);
  return new Map(body.instances.map((i) => [i.instance_id, i.status]));
}

/** Polls the list, and only the list, until `done` holds; fails after `ms`. */
async function untilListed(url: string, done: (statuses: Map<string, string>) => boolean, ms: number): Promise<Map<string, string>> {
  const deadline = Date.now() + ms;
  for (;;) {
    const statuses = await listed(url);
    if (done(statuses)) return statuses;
    if (Date.now() > deadline) throw new Error(`list still ${JSON.stringify([...statuses])} after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

describe("the first hour on the embedded default, from the build", () => {
  let kept = "";
  let limited = "";

  it("leads the sync loop, which advances listed statuses and enforces a max_hours limit", async () => {
    service = await start();
    const create = (config: object) =>
      json<{ instance_id: string }>(
        fetch(`${service.url}/api/gpu/instances/from-template?template_name=budget`, { method: "POST", body: JSON.stringify({ custom_config: config }) }),
      );
    kept = (await create({})).body.instance_id;
    limited = (await create({ max_hours: 0.0005 })).body.instance_id; // 1.8 s

    // No direct read of either instance: only the loop can move them.
    const statuses = await untilListed(service.url, (s) => s.get(kept) === "running_llm" && s.get(limited) === "destroyed", 30_000);
    expect(statuses.get(kept)).toBe("running_llm");
    expect(service.logs.map((l) => l.msg)).toContain("sync leadership taken");

    const logs = await json<{ logs: Array<{ operation: string }> }>(fetch(`${service.url}/api/gpu/instances/${limited}/logs?limit=20`));
    expect(logs.body.logs.map((l) => l.operation)).toContain("auto_destroy");
  }, 150_000);

  it("keeps answering GPU calls while an indexing run of sample data streams", async () => {
    // The README's sample-data command, on the embedded database of the running service.
    const generated = await run("npm", ["run", "--silent", "generate:goods", "--", "--rows", "20000"], {
      cwd: root,
      env: { ...withoutDatabaseUrl(), DATA_DIR: dataDir },
    });
    expect(generated.stdout).toMatch(/^inserted 20000 goods rows into the embedded PostgreSQL/);

    let indexing = true;
    const index = json<{ indexed_count: number }>(fetch(`${service.url}/api/search/v1/index/db/goods`)).finally(() => (indexing = false));
    const during: number[] = [];
    while (indexing) {
      const { status } = await json(fetch(`${service.url}/api/gpu/statistics`));
      if (indexing) during.push(status);
    }
    const { status, body } = await index;
    expect(status).toBe(200);
    expect(body.indexed_count).toBeGreaterThan(17_000);
    // Calls got answers during the run (a single shared connection would have held them until its end).
    expect(during.length).toBeGreaterThanOrEqual(3);
    expect(during.every((s) => s === 200)).toBe(true);
  }, 150_000);

  it("has logged no error line while it ran", () => {
    expect(errorLines(service)).toEqual([]);
  });

  it("starts again after a SIGKILL, on the same data, and the loop runs again", async () => {
    const killed = await service.stop("SIGKILL");
    expect(killed.signal).toBe("SIGKILL");

    service = await start();
    const statuses = await listed(service.url);
    expect(statuses.get(kept)).toBe("running_llm");
    expect(statuses.get(limited)).toBe("destroyed");

    const destroyed = await fetch(`${service.url}/api/gpu/instances/${kept}`, { method: "DELETE" });
    expect(destroyed.status).toBe(200);
    await untilListed(service.url, (s) => s.get(kept) === "destroyed", 10_000);
    expect(service.logs.map((l) => l.msg)).toContain("sync leadership taken");
    expect(errorLines(service)).toEqual([]);
  }, 150_000);
});

function withoutDatabaseUrl(): NodeJS.ProcessEnv {
  const { DATABASE_URL: _unused, ...rest } = process.env;
  return rest;
}
