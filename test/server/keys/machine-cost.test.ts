import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { KnexKeyUsageStore } from "../../../src/server/keys/key-usage-store.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

// Each key's machine cost on the real PostgreSQL (SPEC.md section 2, "Keys for callers", "Dollars,
// two ways"): a minute's billed machine dollars of an endpoint, from its instance records, split
// over the keys by their share of that minute's tokens, in integer micro-dollars that add up to
// the minute's dollars; minutes with no tokens unattributed.

const MINUTE = 60_000;
let db: TestDatabase;
let store: KnexKeyUsageStore;
/** A whole minute, an hour ago, so that no live machine's "now" falls in it. */
const base = Math.floor((Date.now() - 3_600_000) / 3_600_000) * 3_600_000;
const minute = (n: number) => new Date(base + n * MINUTE);

beforeAll(async () => {
  db = await createTestDatabase();
  store = KnexKeyUsageStore.create({ knex: db.knex });
});

afterAll(async () => {
  await db?.drop();
});

beforeEach(async () => {
  await db.knex("gpu_key_usage_minutes").delete();
  await db.knex("gpu_instances").delete();
});

let nextInstance = 1;
async function machine(endpoint: string, ratePerHour: number, from: Date, to: Date | null): Promise<void> {
  const id = `gpu-${nextInstance++}`;
  await db.knex("gpu_instances").insert({
    instance_id: id,
    offer_id: `offer-${id}`,
    status: to === null ? "running" : "destroyed",
    cost_per_hour: ratePerHour,
    endpoint,
    created_at: from,
    updated_at: from,
    destroyed_at: to,
  });
}

async function usage(key: string, endpoint: string, at: Date, promptTokens: number, completionTokens: number, processId = "p1", refused = {}): Promise<void> {
  await db.knex("gpu_key_usage_minutes").insert({
    key_name: key,
    endpoint_name: endpoint,
    minute: at,
    process_id: processId,
    requests: 1,
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    refused: JSON.stringify(refused),
  });
}

async function machineCost(key: string): Promise<Array<[number, number]>> {
  const points = await store.points({ keyName: key, from: minute(0), step: "minute" });
  return points.map((p) => [(p.at.getTime() - base) / MINUTE, p.machineCostMicros]);
}

describe("a key's machine cost", () => {
  it("splits a minute's machine dollars between two keys by their tokens, 3:1 exactly", async () => {
    // $3.60/h for the whole minute: 60,000 micro-dollars.
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 200, 100);
    await usage("team-b", "chat", minute(1), 50, 50);
    expect(await machineCost("team-a")).toEqual([[1, 45_000]]);
    expect(await machineCost("team-b")).toEqual([[1, 15_000]]);
  });

  it("counts only what the machines billed during the minute, and shares that add up to it exactly", async () => {
    // $1/h over a whole minute (16,666.67 micro-dollars: 16,667), and a $3.60/h machine from the
    // minute's 30th second (30,000): 46,667 to split 1:1:1.
    await machine("chat", 1, minute(-5), null);
    await machine("chat", 3.6, new Date(minute(2).getTime() + 30_000), minute(3));
    await machine("other", 100, minute(0), null);
    for (const key of ["k1", "k2", "k3"]) await usage(key, "chat", minute(2), 1, 0);
    const shares = await Promise.all(["k1", "k2", "k3"].map(async (key) => (await machineCost(key))[0]![1]));
    expect(shares.reduce((a, b) => a + b)).toBe(46_667);
    for (const share of shares) expect(Math.abs(share - 46_667 / 3)).toBeLessThan(1);
  });

  it("leaves a minute with no tokens unattributed", async () => {
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 0, 0, "p1", { rpm_limit: 3 });
    await usage("team-a", "chat", minute(2), 10, 0);
    await usage("team-b", "chat", minute(2), 10, 0);
    expect(await machineCost("team-a")).toEqual([
      [1, 0],
      [2, 30_000],
    ]);
  });

  it("counts two processes' rows of one minute as that minute's tokens", async () => {
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 100, 0, "p1");
    await usage("team-a", "chat", minute(1), 50, 50, "p2");
    await usage("team-b", "chat", minute(1), 30, 20, "p2");
    expect(await machineCost("team-a")).toEqual([[1, 48_000]]);
    expect(await machineCost("team-b")).toEqual([[1, 12_000]]);
  });

  it("is summed into the hour's point and into the key's period", async () => {
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 3, 0);
    await usage("team-b", "chat", minute(1), 1, 0);
    await usage("team-a", "chat", minute(2), 1, 0);
    // After the machine ended: nothing billed.
    await usage("team-a", "chat", minute(11), 5, 0);
    const hours = await store.points({ keyName: "team-a", from: minute(0), step: "hour" });
    expect(hours.map((p) => p.machineCostMicros)).toEqual([45_000 + 60_000]);
    const totals = await store.periodTotals([
      { keyName: "team-a", from: minute(2) },
      { keyName: "team-b", from: minute(0) },
    ]);
    expect(totals.get("team-a")?.machineCostMicros).toBe(60_000);
    expect(totals.get("team-b")?.machineCostMicros).toBe(15_000);
  });
});
