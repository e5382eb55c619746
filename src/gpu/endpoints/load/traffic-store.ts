import type { Knex } from "knex";
import type { TrafficEntry, TrafficOutcome } from "../../../module.js";

// What each service process's proxy answered, per endpoint name and minute (table
// gpu_endpoint_traffic): each process upserts its minutes, the history sampler on the sync leader
// sums a minute over every process. Rows map here and nowhere else.

/** Requests by outcome and the first byte's histogram (FIRST_BYTE_BOUNDS_MS buckets and one more). */
export interface TrafficCounts {
  counts: Record<TrafficOutcome, number>;
  /** Empty when no answer's first byte was counted. */
  firstByte: number[];
}

export interface TrafficStore {
  /** Writes one process's minutes as they stand (absolute counts: writing one twice changes nothing). */
  publish(processId: string, entries: readonly TrafficEntry[]): Promise<void>;
  /** The minute that starts at `minute`, summed over every process, by endpoint name. */
  sumMinute(minute: Date): Promise<Map<string, TrafficCounts>>;
  /**
   * The minutes (their starts) any process wrote since `since` (every minute held when undefined),
   * and `asOf`, the database's clock as this read began: the next read's `since`, on the clock
   * the writes are stamped with.
   */
  minutesWrittenSince(since: Date | undefined): Promise<{ asOf: Date; minutes: Date[] }>;
  /** Deletes the minutes that started before `before`; the number deleted. */
  prune(before: Date): Promise<number>;
}

const TABLE = "gpu_endpoint_traffic";

/** Each outcome's column, in both traffic and history tables. */
export const OUTCOME_COLUMNS: Readonly<Record<TrafficOutcome, string>> = {
  ok: "ok",
  clientError: "client_error",
  serverError: "server_error",
  held: "held_requests",
  continued: "continued",
  cut: "cut",
};

/** Sums of the outcome columns, `sum(ok)::int as ok, ...`, over the rows of a group. */
export const SUM_OUTCOMES = Object.values(OUTCOME_COLUMNS)
  .map((c) => `sum(${c})::int as ${c}`)
  .join(", ");

/** The counts of a row that carries the outcome columns and a first_byte array. */
export function trafficOf(row: Record<string, unknown>): TrafficCounts {
  const counts = Object.fromEntries(Object.entries(OUTCOME_COLUMNS).map(([outcome, column]) => [outcome, Number(row[column] ?? 0)]));
  return { counts: counts as Record<TrafficOutcome, number>, firstByte: ((row.first_byte as number[] | null) ?? []).map(Number) };
}

export class KnexTrafficStore implements TrafficStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): KnexTrafficStore {
    return new KnexTrafficStore(knex);
  }

  async publish(processId: string, entries: readonly TrafficEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const rows = entries.map((e) => ({
      process_id: processId,
      endpoint_name: e.endpointName,
      minute: e.minute,
      ...Object.fromEntries(Object.entries(OUTCOME_COLUMNS).map(([outcome, column]) => [column, e.counts[outcome as TrafficOutcome]])),
      first_byte: e.firstByte.some((n) => n > 0) ? e.firstByte : null,
      updated_at: this.knex.fn.now(),
    }));
    await this.knex(TABLE).insert(rows).onConflict(["process_id", "endpoint_name", "minute"]).merge();
  }

  async sumMinute(minute: Date): Promise<Map<string, TrafficCounts>> {
    // The histograms add up bucket by bucket: unnest with the bucket's position, sum, and fold back.
    const { rows } = await this.knex.raw<{ rows: Array<Record<string, unknown>> }>(
      `with minute as (select * from ${TABLE} where minute = :minute),
            buckets as (select endpoint_name, i, sum(n)::int as n
                        from minute, unnest(first_byte) with ordinality as b(n, i) group by endpoint_name, i)
       select m.endpoint_name, ${SUM_OUTCOMES},
              (select array_agg(b.n order by b.i) from buckets b where b.endpoint_name = m.endpoint_name) as first_byte
       from minute m group by m.endpoint_name`,
      { minute },
    );
    return new Map(rows.map((row) => [String(row.endpoint_name), trafficOf(row)]));
  }

  async minutesWrittenSince(since: Date | undefined): Promise<{ asOf: Date; minutes: Date[] }> {
    const { rows } = await this.knex.raw<{ rows: Array<{ as_of: Date }> }>("select now() as as_of");
    const query = this.knex(TABLE).distinct("minute").orderBy("minute");
    if (since !== undefined) query.where("updated_at", ">=", since);
    const minutes = (await query) as Array<{ minute: Date }>;
    return { asOf: rows[0]!.as_of, minutes: minutes.map((m) => m.minute) };
  }

  async prune(before: Date): Promise<number> {
    return this.knex(TABLE).where("minute", "<", before).delete();
  }
}
