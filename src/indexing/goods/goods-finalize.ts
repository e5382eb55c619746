import type { Knex } from "knex";
import { isDatabaseUnavailable } from "../../db/database-errors.js";
import type { BulkAction } from "../pipeline/bulk-sender.js";
import { IndexingError } from "../indexing-error.js";

// Cursor finalize (SPEC.md section 3): as each bulk settles, one statement per kind of action
// flips INDEX_YN to 'Y' for exactly the rows that bulk carried and Elasticsearch accepted (or
// deleted), and only if the row is unchanged since it was read: compare-and-set on GOODS_NO and
// INDEX_VERSION, which every change of a document column draws anew (the live feed's trigger).
// Deleted-row records are cleared the same way, on their version. The keys are the actions' _id
// and version, read back from the bulk. A run that dies keeps the progress of its settled bulks;
// nothing per row outlives its bulk.

export interface FinalizeOptions {
  flip: boolean;
}

/** Returns the rows flipped to 'Y'. */
export async function finalizeSettled(knex: Knex, actions: readonly BulkAction[], options: FinalizeOptions): Promise<number> {
  try {
    const deletes = actions.filter((a) => a.kind === "delete");
    let flipped = 0;
    if (options.flip) {
      flipped += await flip(knex, actions.filter((a) => a.kind === "index"), "Y");
      flipped += await flip(knex, deletes, "N");
    }
    // A delete is a USE_YN='N' row's or a tombstone's: versions are unique, so it matches one of them.
    await clearDeleted(knex, deletes);
    return flipped;
  } catch (err) {
    throw new IndexingError("FINALIZE_FAILED", "flipping INDEX_YN to 'Y' for a settled bulk failed", { cause: err, unavailable: isDatabaseUnavailable(err) });
  }
}

async function flip(knex: Knex, keys: readonly BulkAction[], useYn: "Y" | "N"): Promise<number> {
  if (keys.length === 0) return 0;
  const result = await knex.raw<{ rowCount: number }>(
    `update "PR_GOODS_SEARCH_INTF" g set "INDEX_YN" = 'Y'
       from unnest(?::text[], ?::bigint[]) as k(goods_no, version)
      where g."GOODS_NO" = k.goods_no and g."INDEX_VERSION" = k.version and g."USE_YN" = ? and g."INDEX_YN" = 'N'`,
    [goodsNos(keys), versions(keys), useYn],
  );
  return result.rowCount;
}

async function clearDeleted(knex: Knex, keys: readonly BulkAction[]): Promise<void> {
  if (keys.length === 0) return;
  await knex.raw(
    `delete from goods_index_deleted d using unnest(?::text[], ?::bigint[]) as k(goods_no, version)
      where d.goods_no = k.goods_no and d.version = k.version`,
    [goodsNos(keys), versions(keys)],
  );
}

// The keys travel as two array parameters, whatever the bulk size: cheaper for PostgreSQL to
// read than one JSON document of records.
function goodsNos(keys: readonly BulkAction[]): string[] {
  return keys.map((k) => k.id);
}

/** Every goods action carries its row's or tombstone's version (goods-rows.ts). */
function versions(keys: readonly BulkAction[]): string[] {
  return keys.map((k) => k.version as string);
}

/** After a rebuild went live: deletions recorded before its snapshot are already absent from it. */
export async function clearDeletedBefore(knex: Knex, snapshotAt: Date): Promise<void> {
  await knex("goods_index_deleted").where("deleted_at", "<", snapshotAt).delete();
}

/**
 * After the batch's rebuild went live: one statement flips every 'N' row that the rebuild's
 * snapshot saw (modified before the run started) except those whose documents were rejected.
 * USE_YN='N' rows are flipped too: the new index never had their documents.
 */
export async function finalizeRebuilt(knex: Knex, startedAt: Date, rejected: readonly string[]): Promise<number> {
  try {
    const result = await knex.raw<{ rowCount: number }>(
      `update "PR_GOODS_SEARCH_INTF" set "INDEX_YN" = 'Y'
        where "INDEX_YN" = 'N' and "SYS_MOD_DTM" < ? and not ("GOODS_NO" = any(array(select jsonb_array_elements_text(?::jsonb))))`,
      [startedAt, JSON.stringify(rejected)],
    );
    return result.rowCount;
  } catch (err) {
    throw new IndexingError("FINALIZE_FAILED", "flipping INDEX_YN to 'Y' after the rebuild failed", { cause: err, unavailable: isDatabaseUnavailable(err) });
  }
}
