import type { Knex } from "knex";
import { deleteLine, DOCUMENT, INDEX_LINES } from "../goods/goods-rows.js";

// The live feed in PostgreSQL (migration 20261125000000_goods_live_feed): products changed and
// not yet applied, one entry per product. The follower claims the oldest due entries, reads the
// products' current bulk items, and settles each entry after Elasticsearch answered: removed if it is
// still the change that was applied, else kept for the newer change; failed ones wait with backoff.

export interface FeedEntry {
  readonly goodsNo: string;
  /** Which change the entry held when claimed (bigint as text). */
  readonly changeId: string;
  /** Failed attempts so far. */
  readonly attempts: number;
}

/**
 * The oldest entries that are due: never refused since their last change, or refused and their
 * backoff over. Each kind is read from its own partial index (migration
 * 20261126000000_goods_live_feed_due), so that a claim never walks past the entries still waiting
 * out a backoff. Entries a writer holds are skipped: its transaction is changing the product
 * again, and until it ends the entry could not be removed (removeApplied skips it), so a pass
 * would send the product again and again, ahead of everything behind it. The share locks last
 * only as long as this statement.
 */
export const CLAIM_DUE_SQL = `
  with fresh as (
    select goods_no, change_id, attempts, changed_at from goods_live_feed
     where retry_at is null
     order by changed_at limit :limit
       for share skip locked
  ), retry as (
    select goods_no, change_id, attempts, changed_at from goods_live_feed
     where retry_at <= now()
     order by retry_at limit :limit
       for share skip locked
  )
  select goods_no, change_id, attempts from (select * from fresh union all select * from retry) due
   order by changed_at limit :limit`;

export async function claimDue(knex: Knex, limit: number): Promise<FeedEntry[]> {
  const { rows } = await knex.raw<{ rows: Array<{ goods_no: string; change_id: string; attempts: number }> }>(CLAIM_DUE_SQL, { limit });
  return rows.map((r) => ({ goodsNo: r.goods_no, changeId: r.change_id, attempts: r.attempts }));
}

/**
 * The bulk item of each entry's product as it is now (read after the claim: a change committed in
 * between is read too, and its own entry then finds the document already at its version), in the
 * entries' order: the document of an eligible row; else a delete at the version of the change that
 * removed it (the USE_YN='N' row's, the tombstone's, or, gone with no tombstone left because a run
 * sent its delete and cleared it or a full load removed it with the triggers off, the entry's
 * change_id, which is at least the delete's version).
 */
export async function readItems(knex: Knex, entries: readonly FeedEntry[]): Promise<string[]> {
  const { rows } = await knex.raw<{ rows: Array<{ goods_no: string; lines: string }> }>(
    `select k.goods_no,
            case when g."USE_YN" = 'Y' then ${INDEX_LINES}
                 else ${deleteLine("k.goods_no", `coalesce(g."INDEX_VERSION", t.version, k.change_id)`)} end as lines
       from unnest(?::text[], ?::bigint[]) as k(goods_no, change_id)
       left join "PR_GOODS_SEARCH_INTF" g on g."GOODS_NO" = k.goods_no
       left join goods_index_deleted t on t.goods_no = k.goods_no
       cross join ${DOCUMENT}`,
    [entries.map((e) => e.goodsNo), entries.map((e) => e.changeId)],
  );
  const lines = new Map(rows.map((r) => [r.goods_no, r.lines]));
  return entries.map((e) => lines.get(e.goodsNo) as string);
}

/**
 * Removes the entries applied, unless a newer change replaced them meanwhile; returns how many went.
 * An entry a writer is changing right now is skipped, not waited for: it is about to hold a newer
 * change (or, rolled back, the same one, which applies again at the same version).
 */
export async function removeApplied(knex: Knex, entries: readonly FeedEntry[]): Promise<number> {
  if (entries.length === 0) return 0;
  const { rows } = await knex.raw<{ rows: Array<{ removed: number }> }>(
    `with settled as (
       select f.goods_no from goods_live_feed f join unnest(?::text[], ?::bigint[]) as k(goods_no, change_id)
           on f.goods_no = k.goods_no and f.change_id = k.change_id
          for update of f skip locked
     ), gone as (
       delete from goods_live_feed f using settled s where f.goods_no = s.goods_no returning 1
     ), counted as (select count(*)::int as removed from gone),
     progress as (
       update goods_live_progress set applied_total = applied_total + (select removed from counted), last_applied_at = now()
     )
     select removed from counted`,
    [entries.map((e) => e.goodsNo), entries.map((e) => e.changeId)],
  );
  return rows[0]?.removed ?? 0;
}

/**
 * Entries Elasticsearch refused wait before their next attempt: 1 s, doubling up to 10 minutes,
 * so that a product it always refuses (a poison row) costs one attempt per 10 minutes, not a loop.
 * A newer change of the product resets them (the triggers).
 */
export async function markFailed(knex: Knex, entries: ReadonlyArray<FeedEntry & { error: string }>): Promise<void> {
  if (entries.length === 0) return;
  await knex.raw(
    `update goods_live_feed f
        set attempts = f.attempts + 1,
            retry_at = now() + least(interval '1 second' * power(2, f.attempts), interval '10 minutes'),
            last_error = k.error
       from unnest(?::text[], ?::bigint[], ?::text[]) as k(goods_no, change_id, error)
      where f.goods_no = k.goods_no and f.change_id = k.change_id`,
    [entries.map((e) => e.goodsNo), entries.map((e) => e.changeId), entries.map((e) => e.error.slice(0, 500))],
  );
}

/**
 * Whether the triggers wake the follower (NOTIFY goods_live): set while it sleeps, cleared while
 * it goes from pass to pass, so that busy writers do not pay for wake-ups no one waits for.
 */
export async function setListening(knex: Knex, listening: boolean): Promise<void> {
  await knex.raw(`update goods_live_wakeup set listening = ? where listening <> ?`, [listening, listening]);
}

export interface FeedBacklog {
  /** Products changed and not yet applied, refused ones included. */
  pendingProducts: number;
  /** Of those, products Elasticsearch refused, waiting out their backoff or due again. */
  retryingProducts: number;
  /**
   * Age of the oldest change not yet applied and never refused, ms; 0 when none. A product
   * refused for good must not hide, or fake, the lag of everything else: it is counted above.
   */
  oldestPendingAgeMs: number;
  appliedTotal: number;
  lastAppliedAt: Date | undefined;
}

export async function measureBacklog(knex: Knex): Promise<FeedBacklog> {
  const { rows } = await knex.raw<{
    rows: Array<{ pending: number; retrying: number; age_ms: number | null; applied_total: string; last_applied_at: Date | null }>;
  }>(
    `select (select count(*)::int from goods_live_feed) as pending,
            (select count(*)::int from goods_live_feed where retry_at is not null) as retrying,
            (select (extract(epoch from now() - min(changed_at)) * 1000)::float8 from goods_live_feed where retry_at is null) as age_ms,
            p.applied_total, p.last_applied_at
       from goods_live_progress p`,
  );
  const row = rows[0];
  return {
    pendingProducts: row?.pending ?? 0,
    retryingProducts: row?.retrying ?? 0,
    oldestPendingAgeMs: Math.max(0, Math.round(row?.age_ms ?? 0)),
    appliedTotal: Number(row?.applied_total ?? 0),
    lastAppliedAt: row?.last_applied_at ? new Date(row.last_applied_at) : undefined,
  };
}
