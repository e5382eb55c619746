import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { serviceGroup, type ServiceProcess } from "../../support/spawn-service.js";
import { waitFor } from "../../support/wait.js";

// One sync leader: two real service processes on one database, exactly one runs the sync and
// reconcile loop (it holds the advisory lock on a dedicated connection); when it is SIGKILLed,
// the other takes over within one interval.

const SYNC_MS = 500;
/** The sync leader's advisory key (src/gpu/lifecycle/sync-leader.ts). */
const LOCK_KEY = "7526466839954025";

let db: TestDatabase;

const services = serviceGroup(() => ({ DATABASE_URL: db.url, ELASTICSEARCH_URL: elasticsearchUrl(), GPU_STATUS_SYNC_MS: String(SYNC_MS) }));
const start = () => services.start();

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await services.stopAll();
  await db?.drop();
});

const leads = (service: ServiceProcess) => service.logs.some((l) => l.msg === "sync leadership taken");

/** Sessions holding the sync leader's lock on the test database. */
async function holders(): Promise<number> {
  const { rows } = await db.knex.raw<{ rows: Array<{ n: string }> }>(
    `select count(*) as n from pg_locks l join pg_database d on d.oid = l.database
     where l.locktype = 'advisory' and l.granted and d.datname = current_database()
       and ((l.classid::bigint << 32) | l.objid::bigint) = ?::bigint`,
    [LOCK_KEY],
  );
  return Number(rows[0]!.n);
}

describe("the sync leader", () => {
  it("is exactly one of two processes, and the other takes over within one interval when it dies", async () => {
    const first = await start();
    await waitFor(() => leads(first), "the first process leading", 10_000);
    const second = await start();
    // Several intervals: the second keeps trying and never gets the lease while the first lives.
    await new Promise((resolve) => setTimeout(resolve, SYNC_MS * 4));
    expect(leads(second)).toBe(false);
    expect(await holders()).toBe(1);

    await first.stop("SIGKILL");
    const killedAt = Date.now();
    await waitFor(() => leads(second), "the second process leading", 10_000, 10);
    const takeover = Date.now() - killedAt;
    console.log(`sync leader takeover after SIGKILL: ${takeover} ms (interval ${SYNC_MS} ms)`);
    // Within one interval of the next round; the slack is for a machine under load.
    expect(takeover).toBeLessThan(SYNC_MS * 2 + 1000);
    expect(await holders()).toBe(1);
  });
});
