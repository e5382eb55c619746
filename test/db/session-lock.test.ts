import { connect, createServer, type AddressInfo, type Server, type Socket } from "node:net";
import pg from "pg";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSessionLock, type SessionLock, type SessionLockOptions } from "../../src/db/session-lock.js";
import { createTestDatabase, queryOnServer, type TestDatabase } from "../support/postgres.js";
import { waitFor } from "../support/wait.js";

// A lock holder that vanishes (its host dies, its network is cut) sends nothing more and closes
// nothing. PostgreSQL kept its session, and the advisory lock, until the server's TCP keep-alive
// gave up, hours later, and no other process could take over. A proxy that stops forwarding
// without closing anything is that cut, seen from both ends.

const KEY = "424242424242";
let db: TestDatabase;
const locks: SessionLock[] = [];
const servers: Server[] = [];

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
});

afterAll(async () => {
  await Promise.all(locks.map((lock) => lock.release()));
  for (const server of servers) server.close();
  await db?.drop();
});

/** A TCP proxy to the database whose freeze() stops forwarding in both directions and closes nothing. */
async function freezingProxy(): Promise<{ url: string; freeze(): void }> {
  const target = new URL(db.url);
  let frozen = false;
  const server = createServer((client: Socket) => {
    const upstream = connect(Number(target.port), target.hostname);
    client.on("data", (chunk) => frozen || upstream.write(chunk));
    upstream.on("data", (chunk) => frozen || client.write(chunk));
    const end = () => frozen || (client.destroy(), upstream.destroy());
    client.on("close", end).on("error", () => undefined);
    upstream.on("close", end).on("error", () => undefined);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = new URL(db.url);
  url.port = String((server.address() as AddressInfo).port);
  return { url: url.toString(), freeze: () => void (frozen = true) };
}

function lock(connectionString: string, logs: string[], options: Partial<SessionLockOptions> = {}): SessionLock {
  const logger = pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line).msg) });
  const created = createSessionLock({
    connectionString,
    key: KEY,
    applicationName: "session-lock-test",
    logger,
    messages: { taken: "taken", released: "released", lost: "lost", failed: "failed" },
    ...options,
  });
  locks.push(created);
  return created;
}

/** One query as a client of its own on the server's maintenance database (which a restart leaves alone). */
const onServer = <T extends pg.QueryResultRow>(sql: string, params: unknown[] = []) => queryOnServer<T>(db, sql, params);

/** The sessions of the test database opened under `applicationName`, with whether each holds `key`'s lock and when it last ran a query. */
async function sessionsOf(applicationName: string, key: string) {
  return onServer<{ pid: number; locked: boolean; idle_ms: number; query: string }>(
    `select a.pid, a.query, (extract(epoch from now() - a.query_start) * 1000)::float8 as idle_ms,
       exists (select 1 from pg_locks l where l.pid = a.pid and l.locktype = 'advisory' and l.granted
               and ((l.classid::bigint << 32) | l.objid::bigint) = $3::bigint) as locked
     from pg_stat_activity a where a.datname = $1 and a.application_name = $2`,
    [db.name, applicationName, key],
  );
}

describe("the session lock", () => {
  it("confirms a term only while it still holds the lock in that term, not once lost and taken again", async () => {
    // A control round that began before its lead was lost and retaken must stop: its plan was
    // made on facts another leader may have acted on meanwhile.
    const key = "454545454545";
    const applicationName = "session-lock-term";
    const logs: string[] = [];
    const holder = lock(db.url, logs, { key, applicationName, renewEveryMs: 100 });
    expect(await holder.hold()).toBe(true);
    const first = holder.term();
    expect(await holder.confirm(first)).toBe(true);

    await onServer(`select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and application_name = $2`, [db.name, applicationName]);
    await waitFor(() => logs.includes("lost"), "the holder to take its session for lost", 5_000, 10);
    expect(await holder.hold()).toBe(true);
    expect(holder.term()).not.toBe(first);
    expect(await holder.confirm(first)).toBe(false);
    expect(await holder.confirm(holder.term())).toBe(true);
    expect(await holder.confirm()).toBe(true);
    await holder.release();
  });

  it("after its session was dropped, opens one session for many callers at once, and holds the lock on the one it renews", async () => {
    // The sync loop and the endpoint controller's two timers ask in the same tick after a
    // database restart; each opening a session of its own left the lock on one nobody renewed.
    const key = "444444444444";
    const applicationName = "session-lock-concurrent";
    const logs: string[] = [];
    const holder = lock(db.url, logs, { key, applicationName, renewEveryMs: 100 });
    expect(await holder.hold()).toBe(true);

    await onServer(`select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and application_name = $2`, [db.name, applicationName]);
    await waitFor(() => logs.includes("lost"), "the holder to take its session for lost", 5_000, 10);

    const answers = await Promise.all(Array.from({ length: 6 }, () => holder.hold()));
    expect(answers).toEqual(Array(6).fill(true));
    // Several renewals later: one session, holding the lock, and that is the one renewed.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const sessions = await sessionsOf(applicationName, key);
    expect(sessions).toHaveLength(1);
    expect(sessions[0]).toMatchObject({ locked: true, query: "select 1" });
    expect(sessions[0]!.idle_ms).toBeLessThan(400);
    await holder.release();
  });


  it("is freed by the server within its idle timeout when the holder is cut off, and the holder takes it for lost first", async () => {
    const proxy = await freezingProxy();
    const holderLogs: string[] = [];
    const timing = { renewEveryMs: 200, queryTimeoutMs: 500, idleTimeoutMs: 1_500 };
    const holder = lock(proxy.url, holderLogs, timing);
    const standby = lock(db.url, [], timing);
    expect(await holder.hold()).toBe(true);
    expect(await standby.hold()).toBe(false);

    proxy.freeze();
    const cutAt = Date.now();
    await waitFor(() => holderLogs.includes("lost"), "the holder to take its lock for lost", 5_000, 20);
    const lostAfter = Date.now() - cutAt;
    await waitFor(() => standby.hold(), "the standby to take the lock", 10_000, 100);
    const takenAfter = Date.now() - cutAt;
    // The holder lets go (renewal + query timeout) before the server frees the lock (idle timeout).
    expect(lostAfter).toBeLessThan(takenAfter);
    // The server's idle clock started at the holder's last renewal, at most renewEveryMs before the cut.
    expect(takenAfter).toBeGreaterThanOrEqual(timing.idleTimeoutMs - timing.renewEveryMs - 50);
  }, 20_000);

  it("asks the server to probe the holder's connection itself", async () => {
    let seen: Record<string, string> = {};
    const holder = lock(db.url, [], {
      key: "434343434343",
      onTaken: async (session) => {
        const { rows } = await session.query<{ name: string; setting: string }>(
          `select name, setting from pg_settings where name in ('tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count', 'idle_session_timeout')`,
        );
        seen = Object.fromEntries(rows.map((r) => [r.name, r.setting]));
      },
    });
    expect(await holder.hold()).toBe(true);
    expect(seen).toEqual({ tcp_keepalives_idle: "10", tcp_keepalives_interval: "5", tcp_keepalives_count: "3", idle_session_timeout: "30000" });
    await holder.release();
  });
});
