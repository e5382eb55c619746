import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sha256Of } from "../../../src/server/auth/token-set.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { spawnService, type ServiceProcess } from "../../support/spawn-service.js";

// SIGHUP re-reads AUTH_TOKENS_FILE in the running process (main.ts), and does not stop it (the
// default action of SIGHUP would). The file is a symlink to a file in another directory, which
// the watcher of the link's directory does not see change: only the signal can bring the change in.

let db: TestDatabase;
let service: ServiceProcess;
const linkDir = mkdtempSync(join(tmpdir(), "tokens-link-"));
const targetDir = mkdtempSync(join(tmpdir(), "tokens-target-"));
const target = join(targetDir, "tokens.json");
const write = (names: string[]) =>
  writeFileSync(target, JSON.stringify({ tokens: names.map((name) => ({ name, sha256: sha256Of(`${name}-secret`).toString("hex"), scopes: ["gpu:read"] })) }));

beforeAll(async () => {
  db = await createTestDatabase();
  write(["first"]);
  symlinkSync(target, join(linkDir, "tokens.json"));
  service = await spawnService({ DATABASE_URL: db.url, AUTH_TOKENS_FILE: join(linkDir, "tokens.json") });
}, 90_000);

afterAll(async () => {
  await service?.stop("SIGTERM");
  await db?.drop();
  rmSync(linkDir, { recursive: true, force: true });
  rmSync(targetDir, { recursive: true, force: true });
});

const statusWith = async (name: string) =>
  (await fetch(`${service.url}/api/gpu/templates`, { headers: { authorization: `Bearer ${name}-secret` } })).status;

describe("SIGHUP", () => {
  it("re-reads the token file without a restart", async () => {
    expect(await statusWith("first")).toBe(200);
    write(["second"]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await statusWith("second")).toBe(401); // the watcher did not see it

    service.child.kill("SIGHUP");
    const until = Date.now() + 5_000;
    while ((await statusWith("second")) !== 200 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await statusWith("second")).toBe(200);
    expect(await statusWith("first")).toBe(401);
    expect(service.child.exitCode).toBeNull();
    expect(service.logs.some((l) => l.msg === "AUTH_TOKENS_FILE reloaded")).toBe(true);
    expect(JSON.stringify(service.logs)).not.toContain("second-secret");
  }, 30_000);
});
