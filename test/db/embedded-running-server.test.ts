import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startEmbeddedPostgres } from "../../src/db/embedded/embedded-postgres.js";
import { processAlive } from "../../src/db/embedded/process-alive.js";
import { embeddedFixtures, reachable } from "../support/embedded-postgres.js";

// A server left in the cluster is recognised by what PostgreSQL records in postmaster.pid (its
// port, start time and data directory), checked by connecting: a process is never signalled on
// its pid or its command line alone, and the cluster reached through a symlink is the same one.

const fixtures = embeddedFixtures();
const decoys: ChildProcess[] = [];
afterAll(() => {
  for (const decoy of decoys) decoy.kill("SIGKILL");
  fixtures.cleanup();
});

/** A live process that is not PostgreSQL, whose command line names `words` (as du or an editor would). */
function decoy(...words: string[]): ChildProcess {
  const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 60000)", ...words], { stdio: "ignore" });
  decoys.push(child);
  return child;
}

/** A postmaster.pid as PostgreSQL writes it, naming `pid` and a port nothing listens on. */
function writePidFile(dir: string, pid: number): string {
  const file = join(dir, "postgres", "postmaster.pid");
  const started = Math.floor(Date.now() / 1000) - 60;
  writeFileSync(file, [pid, join(dir, "postgres"), started, 9, "", "127.0.0.1", "  1234  5", "ready   ", ""].join("\n"));
  return file;
}

async function initialised(): Promise<string> {
  const dir = fixtures.dataDir();
  await (await startEmbeddedPostgres(dir)).stop();
  return dir;
}

describe("a server left in the embedded cluster", () => {
  it("is not taken from a live process whose command line names the cluster: that process is never signalled", async () => {
    const dir = await initialised();
    const bystander = decoy("postgres", join(dir, "postgres"));
    await new Promise((r) => setTimeout(r, 300));
    const pidFile = writePidFile(dir, bystander.pid!);
    const next = await startEmbeddedPostgres(dir, { whenRunning: "refuse" });
    try {
      expect(await reachable(next.url)).toBe(true);
      expect(readFileSync(pidFile, "utf8").split("\n")[0]).not.toBe(String(bystander.pid));
    } finally {
      await next.stop();
    }
    expect(processAlive(bystander.pid!)).toBe(true);
    expect(bystander.signalCode).toBeNull();
  }, 120_000);

  it("is not taken from a live process that reused its pid (no /proc needed): the stale file goes and that process lives", async () => {
    const dir = await initialised();
    const reused = decoy();
    await new Promise((r) => setTimeout(r, 300));
    writePidFile(dir, reused.pid!);
    const next = await startEmbeddedPostgres(dir, { whenRunning: "refuse" });
    await next.stop();
    expect(processAlive(reused.pid!)).toBe(true);
  }, 120_000);

  it("is recognised through a symlinked DATA_DIR: refused while its owner lives, its postmaster.pid kept", async () => {
    const dir = fixtures.dataDir();
    const owner = await fixtures.startOwner(dir);
    const links = mkdtempSync(join(tmpdir(), "embedded-link-"));
    try {
      const linked = join(links, "data");
      symlinkSync(dir, linked);
      await expect(startEmbeddedPostgres(linked, { whenRunning: "refuse" })).rejects.toThrow(new RegExp(`in use by process ${owner.child.pid}`));
      const shared = await startEmbeddedPostgres(linked, { whenRunning: "share" });
      expect(new URL(shared.url).port).toBe(new URL(owner.url).port);
      expect(existsSync(join(dir, "postgres", "postmaster.pid"))).toBe(true);
      expect(await reachable(owner.url)).toBe(true);
    } finally {
      rmSync(links, { recursive: true, force: true });
      owner.child.kill("SIGTERM");
    }
  }, 120_000);
});
