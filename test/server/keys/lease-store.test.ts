import type { Knex } from "knex";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createKnex } from "../../../src/db/knex.js";
import { type KeyLimits, costMicros, estimate, tokenPrice } from "../../../src/server/keys/allowance/limits.js";
import { type Allowances, type KeyRef, createAllowances } from "../../../src/server/keys/allowances.js";
import { KnexLeaseStore } from "../../../src/server/keys/lease-store.js";
import { type TestDatabase, createTestDatabase } from "../../support/postgres.js";

// Two service processes, each its own allowances on its own connection pool, share keys through
// the real PostgreSQL: the sums stay within the limits, each key costs a process at most two
// statements a second, and a process that dies gives its places back within 10 s.

const PRICE = tokenPrice(2, 6);
const REQUEST = estimate({ promptChars: 400, maxTokens: 100 }, 1024, PRICE); // holds 200 tokens
const USED_TOKENS = 150;
const USED_MICROS = costMicros(PRICE, 100, 50); // 500

let db: TestDatabase;
const pools: Knex[] = [];
const running: Allowances[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((a) => a.close()));
  await Promise.all(pools.splice(0).map((k) => k.destroy()));
});
afterAll(async () => {
  await db.drop();
});

/** A process: its pool, its allowances, and the times of its statements on each key. */
function startProcess(name: string): { allowances: Allowances; pool: Knex; statements: Map<string, number[]> } {
  const pool = createKnex(db.url, { poolMax: 4 });
  const statements = new Map<string, number[]>();
  pool.on("query", (query: { bindings?: unknown[] }) => {
    const key = String(query.bindings?.[0]);
    statements.set(key, [...(statements.get(key) ?? []), Date.now()]);
  });
  const allowances = createAllowances({ store: KnexLeaseStore.create({ knex: pool }), processId: name, logger: pino({ level: "silent" }) });
  pools.push(pool);
  running.push(allowances);
  return { allowances, pool, statements };
}

let keys = 0;
const keyWith = (limits: KeyLimits): KeyRef => ({ id: `key-${++keys}`, limits, createdAtMs: Date.now() });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `callers` callers that ask, hold `holdMs` and settle, until `untilMs`; answers what they used. */
async function callers(allowances: Allowances, key: KeyRef, count: number, untilMs: number, holdMs: number) {
  const used = { requests: 0, tokens: 0, micros: 0, refused: 0 };
  await Promise.all(
    Array.from({ length: count }, async () => {
      while (Date.now() < untilMs) {
        const admitted = await allowances.admit(key, REQUEST);
        if (!admitted.admitted) {
          used.refused += 1;
          await sleep(100);
          continue;
        }
        if (holdMs > 0) await sleep(holdMs);
        allowances.settle(admitted.ticket, USED_TOKENS, USED_MICROS);
        used.requests += 1;
        used.tokens += USED_TOKENS;
        used.micros += USED_MICROS;
      }
    }),
  );
  return used;
}

/** The most statements in any one second. */
function busiestSecond(times: readonly number[]): number {
  return Math.max(0, ...times.map((t) => times.filter((u) => u >= t && u < t + 1000).length));
}

describe("keys' leases in PostgreSQL, two processes", () => {
  it("two processes of 64 callers never pass tpm_limit nor max_budget, and use at least 95% of each", async () => {
    const key = keyWith({ tpm: 30_000, budgetMicros: 100_000 });
    const a = startProcess("a");
    const b = startProcess("b");
    const until = Date.now() + 6_000;
    const [usedA, usedB] = await Promise.all([callers(a.allowances, key, 64, until, 10), callers(b.allowances, key, 64, until, 10)]);
    await Promise.all([a.allowances.close(), b.allowances.close()]);
    const tokens = usedA.tokens + usedB.tokens;
    const micros = usedA.micros + usedB.micros;
    expect(tokens).toBeLessThanOrEqual(30_000);
    expect(micros).toBeLessThanOrEqual(100_000);
    expect(tokens).toBeGreaterThanOrEqual(0.95 * 30_000);
    expect(micros).toBeGreaterThanOrEqual(0.95 * 100_000);
    // Both processes served, and the database holds exactly what they used: every lease is back.
    expect(Math.min(usedA.requests, usedB.requests)).toBeGreaterThan(0);
    const window = await db.knex("gpu_key_window_seconds").where({ key_id: key.id }).sum({ tokens: "tokens" }).first();
    expect(Number(window?.tokens)).toBe(tokens);
    expect(await db.knex("gpu_key_leases").where({ key_id: key.id })).toEqual([]);
  });

  it("cost a key at most two statements a second per process at any request rate", async () => {
    const key = keyWith({ maxParallel: 10_000, tpm: 1_000_000_000 });
    const a = startProcess("a");
    const b = startProcess("b");
    const started = Date.now();
    const until = started + 3_000;
    const [usedA, usedB] = await Promise.all([callers(a.allowances, key, 64, until, 0), callers(b.allowances, key, 64, until, 0)]);
    const seconds = Math.ceil((Date.now() - started) / 1000);
    for (const [process, used] of [
      [a, usedA],
      [b, usedB],
    ] as const) {
      const times = process.statements.get(key.id) ?? [];
      expect(used.requests).toBeGreaterThan(1_000);
      expect(busiestSecond(times)).toBeLessThanOrEqual(2);
      expect(times.length).toBeLessThanOrEqual(2 * seconds + 1);
    }
  });

  it("a streamed answer takes more past its hold until tpm_limit has nothing left, then is told to end", async () => {
    const key = keyWith({ tpm: 1_000 });
    const a = startProcess("a");
    const admitted = await a.allowances.admit(key, REQUEST);
    if (!admitted.admitted) throw new Error("refused");
    let take = await a.allowances.takeMore(admitted.ticket, 1, 0);
    while (take.taken) take = await a.allowances.takeMore(admitted.ticket, 1, 0);
    expect(take).toEqual({ taken: false, code: "tpm_limit" });
    expect(admitted.ticket.hold.tokens).toBe(1_000);
  }, 20_000);

  it("a changed limit applies at the next renewal, to the same key in flight", async () => {
    const key = keyWith({ rpm: 2 });
    const a = startProcess("a");
    for (let i = 0; i < 2; i++) expect((await a.allowances.admit(key, REQUEST)).admitted).toBe(true);
    expect(await a.allowances.admit(key, REQUEST)).toMatchObject({ admitted: false, refusal: { code: "rpm_limit" } });
    const raised: KeyRef = { ...key, limits: { rpm: 5 } };
    // A caller that comes back after each refusal gets the three more of the minute, and no fourth.
    let more = 0;
    for (const until = Date.now() + 4_000; Date.now() < until; ) {
      if ((await a.allowances.admit(raised, REQUEST)).admitted) more += 1;
      else await sleep(200);
    }
    expect(more).toBe(3);
  });

  it("a process that dies gives its places back within 10 s; what its lease could have used stays counted", async () => {
    const key = keyWith({ maxParallel: 4, tpm: 10_000 });
    const a = startProcess("a");
    const b = startProcess("b");
    const tickets = [];
    for (let i = 0; i < 4; i++) {
      const admitted = await a.allowances.admit(key, REQUEST);
      if (!admitted.admitted) throw new Error("refused");
      tickets.push(admitted.ticket);
    }
    const refused = await b.allowances.admit(key, REQUEST);
    expect(refused).toMatchObject({ admitted: false, refusal: { code: "parallel_limit", retryAfterS: 1 } });
    const leased = await db.knex("gpu_key_leases").where({ key_id: key.id, holder: "a:0" }).first();
    expect(Number(leased.tokens)).toBeGreaterThanOrEqual(4 * REQUEST.tokens);

    await a.pool.destroy(); // a is gone: no more renewals, no give-back
    const diedAt = Date.now();
    let back: number | undefined;
    while (back === undefined && Date.now() - diedAt < 12_000) {
      const admitted = await b.allowances.admit(key, REQUEST);
      if (admitted.admitted) back = Date.now() - diedAt;
      else await sleep(200);
    }
    expect(back).toBeDefined();
    expect(back!).toBeLessThanOrEqual(10_000);
    // Had a lived on without the database, its answers would have been told to end by then.
    expect(tickets.every((t) => t.signal.aborted)).toBe(true);
    for (let i = 0; i < 3; i++) expect((await b.allowances.admit(key, REQUEST)).admitted).toBe(true);
    // The dead lease's tokens are counted as used for the window: nobody knows what it used.
    const window = await db.knex("gpu_key_window_seconds").where({ key_id: key.id }).sum({ tokens: "tokens" }).first();
    expect(Number(window?.tokens)).toBe(Number(leased.tokens));
  }, 20_000);
});
