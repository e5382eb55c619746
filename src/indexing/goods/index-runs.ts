import type { Knex } from "knex";

// The last run of each indexing mode and of the batch (table goods_index_runs), kept in
// PostgreSQL so that the status RPC and the cron runner's incremental window read the same
// figures on every replica and after a restart.

export type RunKind = "full" | "cursor" | "incremental" | "batch";

export interface IndexRunRecord {
  mode: RunKind;
  success: boolean;
  startedAt: Date;
  finishedAt: Date;
  fetchedCount: number;
  indexedCount: number;
  failedCount: number;
  removedCount: number;
  /** Who started the run (src/actor.ts); unknown for runs recorded before actors were. */
  actor: string;
}


export async function recordRun(knex: Knex, run: IndexRunRecord): Promise<void> {
  await knex.raw(
    `insert into goods_index_runs as r (mode, success, started_at, finished_at, fetched_count, indexed_count, failed_count, removed_count, actor, last_success_started_at)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?, case when ? then ?::timestamptz end)
     on conflict (mode) do update set success = excluded.success, started_at = excluded.started_at,
       finished_at = excluded.finished_at, fetched_count = excluded.fetched_count,
       indexed_count = excluded.indexed_count, failed_count = excluded.failed_count,
       removed_count = excluded.removed_count, actor = excluded.actor,
       last_success_started_at = coalesce(excluded.last_success_started_at, r.last_success_started_at)`,
    [run.mode, run.success, run.startedAt, run.finishedAt, run.fetchedCount, run.indexedCount, run.failedCount, run.removedCount, run.actor, run.success, run.startedAt],
  );
}

export async function lastRuns(knex: Knex): Promise<IndexRunRecord[]> {
  const rows = await knex("goods_index_runs").select("*").orderBy("mode");
  return rows.map((row: Record<string, unknown>) => ({
    mode: row.mode as RunKind,
    success: row.success as boolean,
    startedAt: new Date(row.started_at as Date),
    finishedAt: new Date(row.finished_at as Date),
    fetchedCount: row.fetched_count as number,
    indexedCount: row.indexed_count as number,
    failedCount: row.failed_count as number,
    removedCount: row.removed_count as number,
    actor: row.actor as string,
  }));
}

/**
 * Minutes the scheduled incremental run reads back from the database's now: since the start of
 * the last successful full, incremental or batch run (SPEC.md section 3), at least
 * `leastMinutes`, plus the overlap.
 */
export async function incrementalWindowMinutes(knex: Knex, leastMinutes: number, overlapMinutes: number): Promise<number> {
  const { rows } = await knex.raw<{ rows: Array<{ since: number | null }> }>(
    `select ceil(extract(epoch from (now() - max(last_success_started_at))) / 60)::int as since
       from goods_index_runs where mode in ('full', 'incremental', 'batch')`,
  );
  const since = rows[0]?.since ?? null;
  return Math.max(leastMinutes, since ?? leastMinutes) + overlapMinutes;
}

/** The database's clock: run starts are compared with SYS_MOD_DTM, which it writes. */
export async function databaseNow(knex: Knex): Promise<Date> {
  const { rows } = await knex.raw<{ rows: Array<{ now: Date }> }>("select now() as now");
  const now = rows[0]?.now;
  if (now === undefined) throw new Error("select now() returned no row");
  return new Date(now);
}
