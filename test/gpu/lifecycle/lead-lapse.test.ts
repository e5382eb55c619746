import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import type { SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, queryOnServer, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, type TestServer } from "../../support/server.js";
import { rest } from "../helpers.js";

// A stale leader does nothing more (SPEC.md section 2): when the sync leader's lock lapses in the
// middle of a round (its session ends, as in a database failover, and another process may lead
// from then on), the round's next destroys do not happen. Eight instances reach their max_hours;
// the lock's session is terminated at the first destroy the round makes.

/** More records than the round syncs at once (4), so that some are reached after the lapse. */
const INSTANCES = 8;
const CONCURRENCY = 4;

let db: TestDatabase;
let sim: SimulatedMarketplace;
const servers: TestServer[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  sim = createFastSimulatedMarketplace();
});

afterAll(async () => {
  for (const server of servers) await server.close();
  await sim?.close();
  await db?.drop();
});

/** Ends the sync leader's lock session from a client of its own on the maintenance database. */
async function terminateLeaderSession(): Promise<number> {
  const rows = await queryOnServer(db, `select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and application_name = 'gpu-sync-leader'`, [db.name]);
  return rows.length;
}

/** The simulated marketplace, whose destroys all wait until the leader's session has been ended by the first. */
function lapsingAtFirstDestroy(): { marketplace: Marketplace; destroyed: string[] } {
  const destroyed: string[] = [];
  let lapse: Promise<number> | undefined;
  const marketplace = new Proxy(sim, {
    get(target, name) {
      if (name === "destroyInstance") {
        return async (id: string) => {
          lapse ??= terminateLeaderSession();
          expect(await lapse).toBe(1);
          destroyed.push(id);
          await target.destroyInstance(id);
        };
      }
      const value = Reflect.get(target, name) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { marketplace, destroyed };
}

async function start(marketplace: Marketplace): Promise<TestServer> {
  // No sync round but the start-up one (runFirst), the round this test looks at.
  const server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace, env: { GPU_STATUS_SYNC_MS: "86400000" } });
  servers.push(server);
  return server;
}

describe("a sync round whose lead lapses", () => {
  it("destroys nothing more once its lock's session is gone", async () => {
    const creator = await start(sim);
    for (let i = 0; i < INSTANCES; i++) {
      const res = await rest(creator.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
      expect(res.status).toBe(200);
    }
    await creator.close();
    servers.pop();
    // Every instance reaches its limit before the next process's start-up round.
    await db.knex("gpu_instances").update({ max_hours: 1e-6 });

    const { marketplace, destroyed } = lapsingAtFirstDestroy();
    await start(marketplace);
    const live = await db.knex("gpu_instances").whereNot({ status: "destroyed" });
    const autoDestroys = await db.knex("GpuExecutionLog").where({ operation: "auto_destroy" });
    // At most the destroys already confirmed when the lock lapsed, one per record synced at once.
    expect(destroyed.length).toBeGreaterThanOrEqual(1);
    expect(destroyed.length).toBeLessThanOrEqual(CONCURRENCY);
    expect(live).toHaveLength(INSTANCES - destroyed.length);
    expect(autoDestroys).toHaveLength(destroyed.length);
    // The machines of the records left are still rented, for the next leader's round.
    for (const record of live) expect(await sim.getInstance(record.market_instance_id)).toBeDefined();
    for (const id of destroyed) expect(await sim.getInstance(id)).toBeUndefined();
  });
});
