import type { Knex } from "knex";
import { DEFAULT_READ_TIMEOUT_MS, readWithTimeout } from "../../db/read-timeout.js";
import type { HistoryWindow } from "./history-window.js";

// The fleet's spend over time, from the instance records (SPEC.md section 5, "History"): a record
// bills from its creation to its end (destroyed_at, which a failed record also has; now while it
// lives), as the cost analysis counts it. Computed by the database, not by loading the records,
// and from the records that bill in the window only: its cost follows them, never the records
// the service ever had.

export interface SpendPoint {
  at: Date;
  /** $/h of the machines billing at `at`. */
  costPerHour: number;
  /** What they cost from the window's start to `at`, $. */
  totalCost: number;
}

export interface SpendStore {
  /** One point at each step's end (steps aligned to the epoch) within (from, to], and one at `to`. */
  points(window: HistoryWindow): Promise<SpendPoint[]>;
}

export class KnexSpendStore implements SpendStore {
  private constructor(
    private readonly knex: Knex,
    private readonly readTimeoutMs: number,
  ) {}

  /** `readTimeoutMs`: API_READ_TIMEOUT_MS, the statement timeout of each read. */
  static create({ knex, readTimeoutMs = DEFAULT_READ_TIMEOUT_MS }: { knex: Knex; readTimeoutMs?: number }): KnexSpendStore {
    return new KnexSpendStore(knex, readTimeoutMs);
  }

  async points(window: HistoryWindow): Promise<SpendPoint[]> {
    const { rows } = await readWithTimeout(this.knex, this.readTimeoutMs, (trx) =>
      trx.raw<{ rows: Array<{ at: Date; cost_per_hour: number | null; total_cost: number | null }> }>(SPEND_SQL, {
        from: window.from,
        to: window.to,
        step: window.stepS,
      }),
    );
    return rows.map((row) => ({ at: row.at, costPerHour: settled(row.cost_per_hour), totalCost: settled(row.total_cost) }));
  }
}

/** A running sum of rates that came and went leaves a residue of float rounding where nothing bills: 0. */
function settled(value: number | null): number {
  const n = Number(value ?? 0);
  return Math.abs(n) < 1e-9 ? 0 : n;
}

// A sweep over time. First the records that bill in the window, found by the index on
// destroyed_at: ended after `from`, or still live (created by `to` either way). Each gives events:
// its rate starts at its creation (or `from`), and stops at its end: for the $/h at destroyed_at
// (never while it lives), for the total at destroyed_at or now. The points join the events in
// time order (at one instant, the events before the point: a record created at a point bills
// there, one ended there does not); the running sums of the rates give each point's $/h, and the
// running integral of the total's rate (rate so far times the time to the next event) its total.
// The sums take each instant's events together (a window's default range), so that the order of
// events at one instant never matters.
// Records that end before they start bill nothing and are left out.
const SPEND_SQL = `
  with bounds as (select cast(:from as timestamptz) as w_from, cast(:to as timestamptz) as w_to, now() as w_now),
  points as (
    select to_timestamp(s * :step) as at
    from bounds, generate_series(floor(extract(epoch from w_from) / :step)::bigint + 1, floor(extract(epoch from w_to) / :step)::bigint) as s
    union
    select w_to from bounds
  ),
  billing as (
    select i.created_at, i.destroyed_at, i.cost_per_hour as rate
    from gpu_instances i, bounds b
    where i.destroyed_at > b.w_from and i.created_at <= b.w_to and i.destroyed_at > i.created_at
    union all
    select i.created_at, null, i.cost_per_hour
    from gpu_instances i, bounds b
    where i.destroyed_at is null and i.created_at <= b.w_to and b.w_now > b.w_from
  ),
  events as (
    select greatest(created_at, w_from) as t, 0 as kind, rate as d_rate, rate as d_total from billing, bounds
    union all
    select destroyed_at, 0, -rate, -rate from billing, bounds where destroyed_at <= w_to
    union all
    select greatest(w_now, created_at, w_from), 0, 0, -rate from billing, bounds where destroyed_at is null and w_now <= w_to
    union all
    select at, 1, 0, 0 from points
  ),
  running as (
    select t, kind,
           sum(d_rate) over w as rate,
           sum(d_total) over w as total_rate
    from events
    window w as (order by t, kind)
  ),
  integral as (
    select t, kind, rate,
           coalesce(lag(total_rate) over w * extract(epoch from t - lag(t) over w) / 3600, 0) as piece
    from running
    window w as (order by t, kind rows unbounded preceding)
  ),
  summed as (
    select t, kind, rate, sum(piece) over (order by t, kind) as total_cost from integral
  )
  select t as at, rate as cost_per_hour, total_cost from summed where kind = 1 order by t`;
