import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { EmbeddedPostgresError, startEmbeddedPostgres } from "../../src/db/embedded/embedded-postgres.js";
import { embeddedFixtures, query, reachable, until } from "../support/embedded-postgres.js";

// The embedded PostgreSQL of DATA_DIR: a real server, stopped with the process that started it
// (a SIGKILL included), shared with or refused to a second process, and started again over
// whatever a killed process left behind.

const fixtures = embeddedFixtures();
const { dataDir, startOwner } = fixtures;
afterAll(() => fixtures.cleanup());

describe("the embedded PostgreSQL", () => {
  it("is a real PostgreSQL 18 server with several connections, LISTEN/NOTIFY and a password, kept across restarts", async () => {
    const dir = dataDir();
    const first = await startEmbeddedPostgres(dir);
    try {
      expect(String((await query(first.url, "show server_version")).server_version)).toMatch(/^18\./);
      const clients = await Promise.all([1, 2, 3, 4].map(async () => {
        const client = new pg.Client(first.url);
        await client.connect();
        return client;
      }));
      const heard = new Promise((resolve) => clients[0]!.once("notification", (n) => resolve(n.payload)));
      await clients[0]!.query("listen wake");
      await clients[1]!.query("notify wake, 'up'");
      expect(await heard).toBe("up");
      await Promise.all(clients.map((c) => c.end()));
      await query(first.url, "create table kept (v int)");
      await query(first.url, "insert into kept values (42)");
      const wrongPassword = new URL(first.url);
      wrongPassword.password = "wrong";
      await expect(query(wrongPassword.toString(), "select 1")).rejects.toThrow(/password authentication failed/);
    } finally {
      await first.stop();
    }
    expect(await reachable(first.url)).toBe(false);

    const second = await startEmbeddedPostgres(dir);
    try {
      expect(await query(second.url, "select v from kept")).toEqual({ v: 42 });
    } finally {
      await second.stop();
    }
  }, 120_000);

  it("is refused to a second service and shared with a sample-data command while its owner lives", async () => {
    const dir = dataDir();
    const owner = await startOwner(dir);
    await expect(startEmbeddedPostgres(dir, { whenRunning: "refuse" })).rejects.toThrow(
      new RegExp(`in use by process ${owner.child.pid}: stop that process, or choose another DATA_DIR`),
    );
    const shared = await startEmbeddedPostgres(dir, { whenRunning: "share" });
    expect(shared.url).toBe(owner.url);
    await shared.stop(); // not this process's server: it keeps running
    expect(await reachable(owner.url)).toBe(true);
    owner.child.kill("SIGTERM");
    await until(async () => !(await reachable(owner.url)), 10_000);
  }, 120_000);

  it("stops when its owner is SIGKILLed, and starts again for the next process", async () => {
    const dir = dataDir();
    const owner = await startOwner(dir);
    owner.child.kill("SIGKILL");
    expect(await until(async () => !(await reachable(owner.url)), 15_000)).toBe(true);
    const next = await startEmbeddedPostgres(dir, { whenRunning: "refuse" });
    try {
      expect(await reachable(next.url)).toBe(true);
    } finally {
      await next.stop();
    }
  }, 120_000);

  it("stops a server left running by a dead owner, and ignores a postmaster.pid whose process is gone", async () => {
    const dir = dataDir();
    const orphan = await startOwner(dir);
    // The owner's pid as a process that is gone: what a crash leaves when the watchdog died too.
    writeFileSync(join(dir, "postgres.owner"), "999999999\n");
    const next = await startEmbeddedPostgres(dir, { whenRunning: "refuse" });
    try {
      expect(await reachable(next.url)).toBe(true);
      expect(await reachable(orphan.url)).toBe(next.url === orphan.url);
    } finally {
      await next.stop();
    }
    orphan.child.kill("SIGKILL");

    const pidFile = join(dir, "postgres", "postmaster.pid");
    writeFileSync(pidFile, ["999999999", join(dir, "postgres"), "0", "5432", "", "127.0.0.1", ""].join("\n"));
    const again = await startEmbeddedPostgres(dir);
    try {
      expect(await reachable(again.url)).toBe(true);
      expect(readFileSync(pidFile, "utf8").split("\n")[0]).not.toBe("999999999");
    } finally {
      await again.stop();
    }
    expect(existsSync(pidFile)).toBe(false);
  }, 120_000);

  it("names the owner's pid in an error of its own type", async () => {
    const dir = dataDir();
    const owner = await startOwner(dir);
    const refused = await startEmbeddedPostgres(dir, { whenRunning: "refuse" }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(EmbeddedPostgresError);
    owner.child.kill("SIGTERM");
  }, 120_000);
});
