import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UnavailableError } from "../../../src/errors.js";
import { KnexSpendStore, type SpendPoint } from "../../../src/gpu/history/spend-store.js";
import type { HistoryWindow } from "../../../src/gpu/history/history-window.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { HOUR } from "../seed.js";

// The fleet's spend on the real PostgreSQL: the sweep over the records that bill in the window
// gives what a plain reading of the rule gives (each point: the $/h of the records billing at it,
// and each record's rate times its overlap with the window so far), on a small set of every kind
// of record and on 20,000 records of a year; the read goes through the index on destroyed_at, and
// a read held past its statement timeout is a 503.

const DAY = 24 * HOUR;

interface Rec {
  id: string;
  createdAt: number;
  destroyedAt: number | null;
  rate: number;
}

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

async function insert(records: readonly Rec[]): Promise<void> {
  const rows = records.map((r) => ({
    instance_id: r.id,
    offer_id: `offer-${r.id}`,
    image_name: "img",
    status: r.destroyedAt === null ? "running" : "destroyed",
    gpu_info: JSON.stringify({ gpu_name: "RTX 4090", num_gpus: 1, gpu_ram: 24 }),
    cost_per_hour: r.rate,
    created_at: new Date(r.createdAt),
    updated_at: new Date(r.createdAt),
    destroyed_at: r.destroyedAt === null ? null : new Date(r.destroyedAt),
  }));
  for (let i = 0; i < rows.length; i += 1000) await db.knex("gpu_instances").insert(rows.slice(i, i + 1000));
}

/** The rule as SPEC.md states it, record by record (`to` is in the past, so a live record's end is past every point). */
function reference(records: readonly Rec[], window: HistoryWindow, now: number): SpendPoint[] {
  const from = window.from.getTime();
  const to = window.to.getTime();
  const step = window.stepS * 1000;
  const ats = new Set<number>();
  for (let s = Math.floor(from / step) + 1; s * step <= to; s++) ats.add(s * step);
  ats.add(to);
  return [...ats]
    .sort((x, y) => x - y)
    .map((at) => {
      const counted = records.filter((r) => r.createdAt <= at && (r.destroyedAt ?? now) > from);
      const costPerHour = counted.filter((r) => (r.destroyedAt ?? Infinity) > at).reduce((sum, r) => sum + r.rate, 0);
      const totalCost = counted.reduce((sum, r) => sum + (r.rate * Math.max(0, Math.min(r.destroyedAt ?? now, at) - Math.max(r.createdAt, from))) / HOUR, 0);
      return { at: new Date(at), costPerHour, totalCost };
    });
}

const rounded = (points: SpendPoint[]) => points.map((p) => ({ at: p.at.toISOString(), costPerHour: p.costPerHour.toFixed(6), totalCost: p.totalCost.toFixed(6) }));

/** A small deterministic generator, so that a failure can be run again as it was. */
function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
    return s / 2 ** 31;
  };
}

describe("the fleet's spend", () => {
  // Whole hours, so that 60 s and 3,600 s steps fall on its edges; long enough ago that no
  // record of a later test (all before it) changes it.
  const to = Math.floor(Date.now() / HOUR) * HOUR - 2 * DAY;

  it("gives each point the $/h billing at it and the cost since from, as the rule counts them", async () => {
    const from = to - 6 * HOUR;
    const small: Rec[] = [
      { id: "gpu-s01", createdAt: from - 10 * HOUR, destroyedAt: from - 5 * HOUR, rate: 1 }, // ended before the window
      { id: "gpu-s02", createdAt: from - HOUR, destroyedAt: from, rate: 2 }, // ended at its start: bills nothing in it
      { id: "gpu-s03", createdAt: from - HOUR, destroyedAt: from + 90 * 60_000, rate: 0.5 }, // ends inside
      { id: "gpu-s04", createdAt: from + 2 * HOUR, destroyedAt: from + 3 * HOUR, rate: 0.25 }, // created and ended on points
      { id: "gpu-s05", createdAt: from + 30 * 60_000 + 17_000, destroyedAt: null, rate: 0.7 }, // live, created between points
      { id: "gpu-s06", createdAt: from - 3 * DAY, destroyedAt: null, rate: 0.1 }, // live since before the window
      { id: "gpu-s07", createdAt: to + HOUR, destroyedAt: null, rate: 5 }, // created after it
      { id: "gpu-s08", createdAt: from + HOUR, destroyedAt: from + HOUR, rate: 3 }, // a failed create: no time billed
      { id: "gpu-s09", createdAt: to - 1_000, destroyedAt: to + 1_000, rate: 1.5 }, // across its end
      { id: "gpu-s10", createdAt: from + 4 * HOUR + 1, destroyedAt: from + 4 * HOUR + 2, rate: 7 }, // a few milliseconds
    ];
    await insert(small);
    const store = KnexSpendStore.create({ knex: db.knex });
    for (const window of [
      { from: new Date(from), to: new Date(to), stepS: 3600 },
      { from: new Date(from), to: new Date(to), stepS: 60 },
      { from: new Date(from + 7 * 60_000 + 5_000), to: new Date(to - 13_000), stepS: 1200 },
    ]) {
      const points = await store.points(window);
      expect(rounded(points)).toEqual(rounded(reference(small, window, Date.now())));
    }
    // By hand, at the hours: s03 (0.5 $/h) and s06 (0.1 $/h) from the start, s05 (0.7 $/h) after half an hour.
    const hourly = await store.points({ from: new Date(from), to: new Date(to), stepS: 3600 });
    expect(hourly[0]).toEqual({ at: new Date(from + HOUR), costPerHour: expect.closeTo(1.3, 9), totalCost: expect.closeTo(0.5 + 0.1 + 0.7 * ((30 * 60 - 17) / 3600), 9) });
  });

  it("reads only the records that bill in the window, and counts them right among 20,000 of a year", async () => {
    const next = random(55);
    const year: Rec[] = Array.from({ length: 20_000 }, (_, i) => {
      const createdAt = Math.round(to - 365 * DAY * next());
      const live = i % 700 === 0;
      const lasts = 10 * 60_000 + next() * 3 * DAY;
      return { id: `gpu-y${i}`, createdAt, destroyedAt: live ? null : Math.min(Math.round(createdAt + lasts), to - 3 * DAY + Math.round(next() * 6 * DAY)), rate: Math.round(next() * 400) / 100 };
    }).filter((r) => r.destroyedAt === null || r.destroyedAt > r.createdAt);
    await db.knex("gpu_instances").delete();
    await insert(year);
    await db.knex.raw("analyze gpu_instances");
    const window = { from: new Date(to - DAY), to: new Date(to), stepS: 60 };

    const points = await KnexSpendStore.create({ knex: db.knex }).points(window);

    expect(points).toHaveLength(1440);
    expect(rounded(points)).toEqual(rounded(reference(year, window, Date.now())));
    const billing = year.filter((r) => r.createdAt <= to && (r.destroyedAt ?? Infinity) > to - DAY).length;
    expect(billing).toBeGreaterThan(50);
    expect(billing).toBeLessThan(1_000);
    // The plan finds them by the index, not by reading every record.
    const plan = await db.knex.raw<{ rows: Array<{ "QUERY PLAN": string }> }>(
      "explain select created_at from gpu_instances where destroyed_at > ? and created_at <= ? union all select created_at from gpu_instances where destroyed_at is null and created_at <= ?",
      [window.from, window.to, window.to],
    );
    const text = plan.rows.map((r) => r["QUERY PLAN"]).join("\n");
    expect(text).toContain("gpu_instances_destroyed_at_idx");
    expect(text).not.toContain("Seq Scan");
  });

  it("answers a read that outlasts its statement timeout with a 503 that names the setting", async () => {
    const store = KnexSpendStore.create({ knex: db.knex, readTimeoutMs: 200 });
    // Another session holds the table: the read waits until its timeout cancels it.
    const holder = await db.knex.transaction();
    try {
      await holder.raw("lock table gpu_instances in access exclusive mode");
      const read = store.points({ from: new Date(to - HOUR), to: new Date(to), stepS: 60 });
      await expect(read).rejects.toBeInstanceOf(UnavailableError);
      await expect(read).rejects.toThrow(/longer than 200 ms .*API_READ_TIMEOUT_MS/);
    } finally {
      await holder.rollback();
    }
    // The connection is whole again: the next read answers.
    expect(await store.points({ from: new Date(to - HOUR), to: new Date(to), stepS: 3600 })).toHaveLength(1);
  });
});
