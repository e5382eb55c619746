import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { elasticsearchUrl } from "./support/elasticsearch.js";
import { readmeCommands, readmeTypeScript } from "./support/readme-examples.js";
import { spawnService, type ServiceProcess } from "./support/spawn-service.js";

// The README as a newcomer follows it: its sample-data commands and curl examples run as written,
// in order, through a shell, against the service started on its embedded default (only the port
// and the sample size differ), and the typed-client snippet runs with the command the README
// gives. Shown answers must match in status and shape (error details word for word).

const root = join(import.meta.dirname, "..");
const readme = join(root, "README.md");
const dataDir = mkdtempSync(join(tmpdir(), "readme-"));
const sh = promisify(execFile);
const suffix = `readme_${process.pid}`;

let service: ServiceProcess;
let port = "";
const shellEnv = () => ({ ...withoutDatabaseUrl(), DATA_DIR: dataDir });

beforeAll(async () => {
  service = await spawnService(
    {
      DATA_DIR: dataDir,
      ELASTICSEARCH_URL: elasticsearchUrl(),
      GOODS_INDEX: `goods_${suffix}`,
      BATCH_LOG_INDEX: `batch_log_${suffix}`,
      SIM_CREATING_MS: "200",
      SIM_LOADING_MS: "200",
      SIM_MODEL_SERVER_START_MS: "200",
    },
    { unset: ["DATABASE_URL"], timeoutMs: 90_000 },
  );
  port = new URL(service.url).port;
});

afterAll(async () => {
  await service?.stop("SIGTERM");
  await fetch(`${elasticsearchUrl()}/*${suffix}*`, { method: "DELETE" }).catch(() => {});
  rmSync(dataDir, { recursive: true, force: true });
});

describe("the README", () => {
  it("runs its sample-data and curl examples as written, with the answers it shows", async () => {
    const commands = readmeCommands(readme, ["curl ", "npm run generate:"]);
    expect(commands.filter((c) => c.command.startsWith("npm run")).length).toBe(2);
    expect(commands.length).toBeGreaterThanOrEqual(20);
    for (const { command, response } of commands) {
      // A tenth of the README's 100,000 sample goods: the answers' shapes do not depend on the count.
      const line = command.replaceAll("localhost:8080", `127.0.0.1:${port}`).replace(/(--rows|--goods) 100000\b/, "$1 10000");
      if (!line.startsWith("curl ")) {
        const { stdout } = await sh("bash", ["-c", line], { cwd: root, env: shellEnv() });
        expect(stdout, command).toMatch(/into the embedded PostgreSQL/);
        continue;
      }
      const { stdout } = await sh("bash", ["-c", `${line} -w '\\n%{http_code}'`], { cwd: root, env: shellEnv() });
      const at = stdout.lastIndexOf("\n");
      const status = Number(stdout.slice(at + 1));
      const body = JSON.parse(stdout.slice(0, at)) as unknown;
      expect(status, `${command}: ${stdout.slice(0, 300)}`).toBe(response?.status ?? 200);
      if (response === undefined) continue;
      if (status >= 400) expect(body, command).toEqual(response.body);
      else expectSameShape(response.body, body, command);
    }
  }, 240_000);

  it("runs its typed-client snippet with `npx tsx client.ts`: it prints what it got and destroys what it rented", async () => {
    const [snippet] = readmeTypeScript(readme);
    const file = `client-${suffix}.ts`;
    writeFileSync(join(root, file), snippet!);
    try {
      const { stdout } = await sh("npx", ["tsx", file], { cwd: root, env: { ...shellEnv(), SERVICE_URL: service.url } });
      const rented = /^Instance (gpu-\d+) is being created/m.exec(stdout)?.[1];
      expect(rented, stdout).toBeDefined();
      expect(stdout).toMatch(new RegExp(`^${rented}: (creating|loading|running|running_llm), \\$[\\d.]+/h$`, "m"));
      expect(stdout).toMatch(/^cursor indexing into '.+': fetched \d+/m);
      const instance = (await (await fetch(`${service.url}/api/gpu/instances/${rented}`)).json()) as { status?: string; instance?: { status: string } };
      expect(JSON.stringify(instance)).toMatch(/"status":"destroyed"/);
    } finally {
      rmSync(join(root, file), { force: true });
    }
  }, 120_000);
});

/** Every field the README shows is in the answer with a value of the same kind (objects recursively). */
function expectSameShape(shown: unknown, got: unknown, where: string): void {
  const kind = (v: unknown) => (Array.isArray(v) ? "array" : v === null ? "null" : typeof v);
  expect(kind(got), where).toBe(kind(shown));
  if (Array.isArray(shown) && shown.length > 0) {
    expect((got as unknown[]).length, `${where}: a non-empty list`).toBeGreaterThan(0);
    expectSameShape(shown[0], (got as unknown[])[0], `${where}[0]`);
  } else if (kind(shown) === "object") {
    for (const [key, value] of Object.entries(shown as Record<string, unknown>)) {
      expect(got, where).toHaveProperty([key]);
      expectSameShape(value, (got as Record<string, unknown>)[key], `${where}.${key}`);
    }
  }
}

function withoutDatabaseUrl(): NodeJS.ProcessEnv {
  const { DATABASE_URL: _unused, ...rest } = process.env;
  return rest;
}
