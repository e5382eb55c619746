import type { Knex } from "knex";
import type { ProxyLoadEntry } from "../../../module.js";

// The endpoints' load across service processes (table gpu_endpoint_load): each process writes its
// proxy's counts, the controller on the sync leader reads their sum, and the key reads sum each
// caller's answers in flight. Rows map here and nowhere else.
// Times cross processes as ages: a process writes last_request_at as the database's now() less how
// long ago it saw the request, and the reader turns the database's age back into its own clock, so
// that no two processes' clocks (nor a process's and the database's) are ever compared.

const TABLE = "gpu_endpoint_load";

/** One endpoint's load summed over every service process that published it lately. */
export interface EndpointLoad {
  /** Requests sent to a replica whose answer has not ended. */
  inFlight: number;
  /** Requests waiting in a proxy for a ready replica. */
  held: number;
  /** inFlight by replica (instance id); a replica with none is absent. */
  byReplica: Map<string, number>;
  /** When the last request arrived at any process, stale rows included (scale to zero's clock); null: none known. */
  lastRequestAt: Date | null;
}

/** Counts of a process not updated for this long are ignored: a killed process's load vanishes by itself. */
export const LOAD_FRESH_MS = 5_000;
/**
 * Rows not updated for this long are deleted. Longer than the longest scale_down_after_s (a day):
 * a row's last_request_at is what tells the controller that a request came within it.
 */
export const LOAD_KEEP_MS = 25 * 3_600_000;

interface LoadRow {
  endpoint_id: string | number;
  in_flight: number;
  held: number;
  by_replica: Record<string, number>;
  last_request_age_ms: string | number | null;
  fresh: boolean;
}

export class LoadStore {
  private constructor(
    private readonly knex: Knex,
    private readonly freshMs: number,
  ) {}

  static create({ knex, freshMs = LOAD_FRESH_MS }: { knex: Knex; freshMs?: number }): LoadStore {
    return new LoadStore(knex, freshMs);
  }

  /** Writes one process's counts for the given endpoints, in one statement; ages are the database's clock. */
  async publish(processId: string, entries: readonly ProxyLoadEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const now = Date.now();
    const rows = entries.map((e) => ({
      process_id: processId,
      endpoint_id: e.endpointId,
      in_flight: e.inFlight,
      held: e.held,
      by_replica: JSON.stringify(e.byReplica),
      by_caller: JSON.stringify(e.byCaller),
      last_request_at: e.lastRequestAt === null ? null : this.knex.raw("now() - ? * interval '1 millisecond'", [Math.max(0, now - e.lastRequestAt.getTime())]),
      updated_at: this.knex.fn.now(),
    }));
    await this.knex(TABLE).insert(rows).onConflict(["process_id", "endpoint_id"]).merge();
  }

  /** Summed over the fresh rows of every process; an endpoint with none has zero load (and is in the map). */
  async readLoad(endpointIds: readonly string[]): Promise<Map<string, EndpointLoad>> {
    const loads = new Map<string, EndpointLoad>(endpointIds.map((id) => [id, { inFlight: 0, held: 0, byReplica: new Map(), lastRequestAt: null }]));
    if (endpointIds.length === 0) return loads;
    const rows = (await this.knex(TABLE)
      .whereIn("endpoint_id", endpointIds)
      .select(
        "endpoint_id",
        "in_flight",
        "held",
        "by_replica",
        this.knex.raw("extract(epoch from now() - last_request_at) * 1000 as last_request_age_ms"),
        this.knex.raw("updated_at > now() - ? * interval '1 millisecond' as fresh", [this.freshMs]),
      )) as LoadRow[];
    const now = Date.now();
    for (const row of rows) {
      const load = loads.get(String(row.endpoint_id))!;
      const lastRequestAt = row.last_request_age_ms === null ? null : new Date(now - Number(row.last_request_age_ms));
      if (lastRequestAt !== null && (load.lastRequestAt === null || lastRequestAt > load.lastRequestAt)) load.lastRequestAt = lastRequestAt;
      if (!row.fresh) continue;
      load.inFlight += row.in_flight;
      load.held += row.held;
      for (const [instanceId, n] of Object.entries(row.by_replica ?? {})) load.byReplica.set(instanceId, (load.byReplica.get(instanceId) ?? 0) + n);
    }
    return loads;
  }

  /**
   * Each caller's answers in flight, summed over the fresh rows of every process and endpoint, in
   * one statement; a caller with none is in the map at zero.
   */
  async callersInFlight(callers: readonly string[]): Promise<Map<string, number>> {
    const counts = new Map<string, number>(callers.map((caller) => [caller, 0]));
    if (callers.length === 0) return counts;
    const { rows } = await this.knex.raw<{ rows: Array<{ caller: string; in_flight: string }> }>(
      `select c.key as caller, sum(c.value::int) as in_flight
         from ${TABLE} l cross join lateral jsonb_each_text(l.by_caller) c
        where l.updated_at > now() - ? * interval '1 millisecond' and c.key = any(?)
        group by c.key`,
      [this.freshMs, [...counts.keys()]],
    );
    for (const row of rows) counts.set(row.caller, Number(row.in_flight));
    return counts;
  }

  /** Deletes rows not updated for `olderThanMs`; the number deleted. */
  async prune(olderThanMs = LOAD_KEEP_MS): Promise<number> {
    return this.knex(TABLE).where("updated_at", "<", this.knex.raw("now() - ? * interval '1 millisecond'", [olderThanMs])).delete();
  }
}
