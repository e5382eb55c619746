import type { Knex } from "knex";
import type { BulkAction } from "../pipeline/bulk-sender.js";
import { deleteLine } from "./goods-rows.js";

// A run through the alias reads one snapshot and may write a product minutes or hours after it
// read it. If the product was deleted or taken off sale meanwhile, the live follower has already
// deleted its document; Elasticsearch remembers that delete's version only for index.gc_deletes
// (60 s on the live index), so a later write of the older state brings the product back. So, as
// each bulk settles, the run looks up the products it has just written and deletes again, at the
// delete's own version, those no longer for sale (docs/indexing.md, "Live changes").

/**
 * Delete lines for the products of the accepted index actions that are no longer for sale by a
 * change newer than the state written: the off-sale row's version, or the tombstone's, or (a run
 * cleared the tombstone already) the live feed entry's, which is the delete's version.
 */
export async function removedSinceRead(knex: Knex, actions: readonly BulkAction[]): Promise<string[]> {
  const written = actions.filter((a) => a.kind === "index" && a.version !== undefined);
  if (written.length === 0) return [];
  const version = `coalesce(g."INDEX_VERSION", t.version, f.change_id)`;
  const { rows } = await knex.raw<{ rows: Array<{ lines: string }> }>(
    `select ${deleteLine("k.goods_no", version)} as lines
       from unnest(?::text[], ?::bigint[]) as k(goods_no, version)
       left join "PR_GOODS_SEARCH_INTF" g on g."GOODS_NO" = k.goods_no
       left join goods_index_deleted t on t.goods_no = k.goods_no
       left join goods_live_feed f on f.goods_no = k.goods_no
      where (g."GOODS_NO" is null or g."USE_YN" <> 'Y') and ${version} > k.version`,
    [written.map((a) => a.id), written.map((a) => a.version as string)],
  );
  return rows.map((r) => r.lines);
}
