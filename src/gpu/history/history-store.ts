import type { Knex } from "knex";
import { DEFAULT_READ_TIMEOUT_MS, readWithTimeout } from "../../db/read-timeout.js";
import type { TrafficOutcome } from "../../module.js";
import { OUTCOME_COLUMNS, SUM_OUTCOMES, trafficOf, type TrafficCounts } from "../endpoints/load/traffic-store.js";
import type { HistoryWindow } from "./history-window.js";

// The endpoints' history (table gpu_endpoint_history): one sample a minute per endpoint, written
// by the sync leader's sampler, read as points of a step, pruned after HISTORY_DAYS. Rows map
// here and nowhere else.

/** One endpoint's minute: its traffic summed over every process, its load and replicas at the minute's end. */
export interface HistorySample extends TrafficCounts {
  endpointId: string;
  /** The minute's end. */
  at: Date;
  load: number;
  held: number;
  readyReplicas: number;
  targetReplicas: number;
  costPerHour: number;
}

/**
 * The samples of one step: traffic summed, load and held at their highest, replicas and $/h as at
 * its last sample, `at` its last sample's time (the end of the last minute it covers).
 */
export type HistoryPoint = Omit<HistorySample, "endpointId">;

export interface HistoryStore {
  /** Writes the samples; a minute already sampled for an endpoint is kept as it is. The number written. */
  record(samples: readonly HistorySample[]): Promise<number>;
  /**
   * Replaces the traffic of minutes already sampled (requests and first bytes, summed again when
   * a process published late); load and replicas stay. The number of samples changed.
   */
  updateTraffic(samples: ReadonlyArray<Pick<HistorySample, "endpointId" | "at" | "counts" | "firstByte">>): Promise<number>;
  /** The end of the latest minute sampled for any endpoint; null when none was. */
  lastSampleAt(): Promise<Date | null>;
  /** The points of `endpointId` over the window: one per step (aligned to the epoch) that holds samples, oldest first. */
  points(endpointId: string, window: HistoryWindow): Promise<HistoryPoint[]>;
  /** Deletes the samples older than `before`; the number deleted. */
  prune(before: Date): Promise<number>;
}

const TABLE = "gpu_endpoint_history";

export class KnexHistoryStore implements HistoryStore {
  private constructor(
    private readonly knex: Knex,
    private readonly readTimeoutMs: number,
  ) {}

  /** `readTimeoutMs`: API_READ_TIMEOUT_MS, the statement timeout of the points' read. */
  static create({ knex, readTimeoutMs = DEFAULT_READ_TIMEOUT_MS }: { knex: Knex; readTimeoutMs?: number }): KnexHistoryStore {
    return new KnexHistoryStore(knex, readTimeoutMs);
  }

  async record(samples: readonly HistorySample[]): Promise<number> {
    if (samples.length === 0) return 0;
    const rows = samples.map((s) => ({
      endpoint_id: s.endpointId,
      at: s.at,
      load: s.load,
      held: s.held,
      ready_replicas: s.readyReplicas,
      target_replicas: s.targetReplicas,
      ...trafficColumns(s),
      cost_per_hour: s.costPerHour,
    }));
    // A leader that changed mid-minute, or a sampler that ran twice, never counts a minute twice.
    const written = await this.knex(TABLE).insert(rows).onConflict(["endpoint_id", "at"]).ignore().returning("at");
    return written.length;
  }

  async updateTraffic(samples: ReadonlyArray<Pick<HistorySample, "endpointId" | "at" | "counts" | "firstByte">>): Promise<number> {
    if (samples.length === 0) return 0;
    return this.knex.transaction(async (trx) => {
      let changed = 0;
      for (const s of samples) changed += await trx(TABLE).where({ endpoint_id: s.endpointId, at: s.at }).update(trafficColumns(s));
      return changed;
    });
  }

  async lastSampleAt(): Promise<Date | null> {
    const row = (await this.knex(TABLE).max("at as at").first()) as { at: Date | null } | undefined;
    return row?.at ?? null;
  }

  async points(endpointId: string, window: HistoryWindow): Promise<HistoryPoint[]> {
    const { rows } = await readWithTimeout(this.knex, this.readTimeoutMs, (trx) =>
      trx.raw<{ rows: Array<Record<string, unknown>> }>(POINTS_SQL, { endpointId, from: window.from, to: window.to, step: window.stepS }),
    );
    return rows.map((row) => ({
      ...trafficOf(row),
      at: row.at as Date,
      load: Number(row.load),
      held: Number(row.held),
      readyReplicas: Number(row.ready_replicas),
      targetReplicas: Number(row.target_replicas),
      costPerHour: Number(row.cost_per_hour),
    }));
  }

  async prune(before: Date): Promise<number> {
    return this.knex(TABLE).where("at", "<", before).delete();
  }
}

function trafficColumns(s: Pick<HistorySample, "counts" | "firstByte">): Record<string, unknown> {
  return {
    ...Object.fromEntries(Object.entries(OUTCOME_COLUMNS).map(([outcome, column]) => [column, s.counts[outcome as TrafficOutcome]])),
    first_byte: s.firstByte.some((n) => n > 0) ? s.firstByte : null,
  };
}

// Samples in (from, to], grouped by the step they end in (steps aligned to the epoch, so that a
// page refreshed every few seconds sees the same steps); histograms summed bucket by bucket.
const POINTS_SQL = `
  with samples as (
    select h.*, ceil(extract(epoch from at) / :step) as step
    from ${TABLE} h where endpoint_id = :endpointId and at > :from and at <= :to
  ),
  buckets as (
    select step, i, sum(n)::int as n from samples, unnest(first_byte) with ordinality as b(n, i) group by step, i
  ),
  sums as (
    select step, max(load) as load, max(held) as held, ${SUM_OUTCOMES} from samples group by step
  ),
  last as (
    select distinct on (step) step, at, ready_replicas, target_replicas, cost_per_hour from samples order by step, at desc
  )
  select last.at, last.ready_replicas, last.target_replicas, last.cost_per_hour, sums.*,
         (select array_agg(b.n order by b.i) from buckets b where b.step = last.step) as first_byte
  from last join sums using (step)
  order by last.at`;
