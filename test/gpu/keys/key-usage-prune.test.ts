import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EndpointStore } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { LoadStore } from "../../../src/gpu/endpoints/load/load-store.js";
import { KnexTrafficStore } from "../../../src/gpu/endpoints/load/traffic-store.js";
import { createHistorySampler } from "../../../src/gpu/history/history-sampler.js";
import { KnexHistoryStore } from "../../../src/gpu/history/history-store.js";
import { InstanceStore } from "../../../src/gpu/store/instance-store.js";
import { KnexKeyUsageStore } from "../../../src/server/keys/key-usage-store.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

// The keys' usage minutes are kept as long as the endpoints' history: the leader's sampler prunes
// both with one rule (HISTORY_DAYS).

const DAY = 86_400_000;
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe("the keys' usage minutes", () => {
  it("are pruned with the endpoints' history, past HISTORY_DAYS", async () => {
    const now = Date.now();
    const minute = (ago: number) => new Date(Math.floor((now - ago) / 60_000) * 60_000);
    await db.knex("gpu_key_usage_minutes").insert([
      { key_name: "k", endpoint_name: "chat", minute: minute(3 * DAY), requests: 1 },
      { key_name: "k", endpoint_name: "chat", minute: minute(DAY), requests: 2 },
    ]);
    const sampler = createHistorySampler({
      ctx: { instances: InstanceStore.create({ knex: db.knex }) },
      endpoints: EndpointStore.create({ knex: db.knex }),
      load: LoadStore.create({ knex: db.knex }),
      traffic: KnexTrafficStore.create({ knex: db.knex }),
      history: KnexHistoryStore.create({ knex: db.knex }),
      keyUsage: KnexKeyUsageStore.create({ knex: db.knex }),
      historyDays: 2,
      logger: pino({ level: "silent" }),
      now: () => now,
    });
    await sampler.sampleDue();
    expect((await db.knex("gpu_key_usage_minutes").select("requests")).map((r: { requests: number }) => r.requests)).toEqual([2]);
  });
});
