import type { Knex } from "knex";
import type { HistoryWindow } from "./history-window.js";

// The fleet's spend over time, from the instance records (SPEC.md section 5, "History"): a record
// bills from its creation to its end (destroyed_at, which a failed record also has; now while it
// lives), as the cost analysis counts it. Computed by the database, not by loading the records.

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
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): KnexSpendStore {
    return new KnexSpendStore(knex);
  }

  async points(window: HistoryWindow): Promise<SpendPoint[]> {
    const { rows } = await this.knex.raw<{ rows: Array<{ at: Date; cost_per_hour: number | null; total_cost: number | null }> }>(SPEND_SQL, {
      from: window.from,
      to: window.to,
      step: window.stepS,
    });
    return rows.map((row) => ({ at: row.at, costPerHour: Number(row.cost_per_hour ?? 0), totalCost: Number(row.total_cost ?? 0) }));
  }
}

// Each point joins the records whose billing overlaps (from, at]: those billing at `at` give its
// $/h, and each one's overlap with the window so far, times its rate, its total.
const SPEND_SQL = `
  with bounds as (select cast(:from as timestamptz) as w_from, cast(:to as timestamptz) as w_to),
  points as (
    select to_timestamp(s * :step) as at
    from bounds, generate_series(floor(extract(epoch from w_from) / :step)::bigint + 1, floor(extract(epoch from w_to) / :step)::bigint) as s
    union
    select w_to from bounds
  )
  select p.at,
         sum(i.cost_per_hour) filter (where coalesce(i.destroyed_at, 'infinity') > p.at) as cost_per_hour,
         sum(i.cost_per_hour * greatest(0, extract(epoch from least(coalesce(i.destroyed_at, now()), p.at) - greatest(i.created_at, b.w_from))) / 3600) as total_cost
  from bounds b cross join points p
  left join gpu_instances i on i.created_at <= p.at and coalesce(i.destroyed_at, now()) > b.w_from
  group by p.at
  order by p.at`;
