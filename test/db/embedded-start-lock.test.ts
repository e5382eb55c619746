import { existsSync, readdirSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startEmbeddedPostgres } from "../../src/db/embedded/embedded-postgres.js";
import { embeddedFixtures, reachable } from "../support/embedded-postgres.js";

// One start of the embedded PostgreSQL at a time per DATA_DIR: a service and a sample-data
// command started together on a fresh DATA_DIR neither run initdb twice nor stop each other's
// server; a lock left by a starter that died does not block the next start.

const fixtures = embeddedFixtures();
afterAll(() => fixtures.cleanup());

describe("two starts of one DATA_DIR at once", () => {
  it("initialise the cluster once and share its server", async () => {
    const dir = fixtures.dataDir();
    // Two sample-data commands on a fresh DATA_DIR: the second waits, then connects to the first one's server.
    const [first, second] = await Promise.all([fixtures.startOwner(dir, "share"), fixtures.startOwner(dir, "share")]);
    expect(new URL(second.url).port).toBe(new URL(first.url).port);
    expect(await reachable(first.url)).toBe(true);
    expect(readdirSync(dir).filter((entry) => entry.startsWith("postgres.init"))).toEqual([]);
    expect(existsSync(join(dir, "postgres.lock"))).toBe(false);
    first.child.kill("SIGTERM");
    second.child.kill("SIGTERM");
  }, 120_000);

  it("leave the service either the server's owner or refused naming the command's pid, never a stopped server", async () => {
    const dir = fixtures.dataDir();
    const [service, command] = await Promise.allSettled([fixtures.startOwner(dir, "refuse"), fixtures.startOwner(dir, "share")]);
    expect(command.status).toBe("fulfilled");
    const { url, child } = (command as PromiseFulfilledResult<Awaited<ReturnType<typeof fixtures.startOwner>>>).value;
    // The command came first: the service exits 1 (in use); else the command shares the service's server.
    if (service.status === "fulfilled") expect(new URL(url).port).toBe(new URL(service.value.url).port);
    else expect(String(service.reason)).toMatch(/owner exited with 1/);
    expect(await reachable(url)).toBe(true);
    child.kill("SIGTERM");
    if (service.status === "fulfilled") service.value.child.kill("SIGTERM");
  }, 120_000);

  it("wait while another process holds the lock, and start once it lets go", async () => {
    const dir = fixtures.dataDir();
    const lock = join(dir, "postgres.lock");
    writeFileSync(lock, JSON.stringify({ pid: process.pid, token: "held-by-this-test" }));
    const waitedFor: number[] = [];
    const starting = startEmbeddedPostgres(dir, { onWaitForStart: (pid) => waitedFor.push(pid) });
    let done = false;
    void starting.then(() => (done = true), () => (done = true));
    await new Promise((r) => setTimeout(r, 1_500));
    expect(done).toBe(false);
    expect(waitedFor).toEqual([process.pid]);
    // The holder ends without removing its lock and without touching it since: it goes stale.
    const old = new Date(Date.now() - 60_000);
    utimesSync(lock, old, old);
    const started = await starting;
    try {
      expect(await reachable(started.url)).toBe(true);
    } finally {
      await started.stop();
    }
  }, 120_000);

  it("is not blocked by the lock of a starter that died", async () => {
    const dir = fixtures.dataDir();
    writeFileSync(join(dir, "postgres.lock"), JSON.stringify({ pid: 999_999_999, token: "a-killed-start" }));
    const began = Date.now();
    const started = await startEmbeddedPostgres(dir);
    try {
      expect(await reachable(started.url)).toBe(true);
      expect(Date.now() - began).toBeLessThan(30_000);
    } finally {
      await started.stop();
    }
    expect(existsSync(join(dir, "postgres.lock"))).toBe(false);
  }, 120_000);
});
