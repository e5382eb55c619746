import type { RowQuery } from "../pipeline/row-reader.js";

// The goods document, written once, by PostgreSQL: every reader (full, cursor and incremental
// runs, the batch's step 2, the live follower) selects one text value per product, the NDJSON
// lines of its bulk item, and Node moves those bytes to Elasticsearch without parsing or
// re-serialising them (docs/indexing.md, "The document is written by PostgreSQL").
//
// row_to_json writes the document's fields in this order with the same escapes as
// JSON.stringify (", \, \b \f \n \r \t, other control characters as \u00xx), numbers as numbers
// and SQL NULL as null: the bytes are those the service sent when it serialised rows itself.
// No ORDER BY: one cursor over one snapshot sees every selected row exactly once, and sorting a
// million rows would only delay the first bulk.

export type IndexingMode = "full" | "incremental" | "cursor";

// Timestamps are RFC 3339 UTC text with milliseconds (the columns' precision).
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;

/** The document's fields, in order, read from the goods row `g`. */
export const DOCUMENT_FIELDS = `g."GOODS_NO", g."GOODS_NM", g."BRAND_NM", g."CATE_CD", g."CATE_PATH", g."SALE_PRICE", g."PROMO_PRICE",
  g."ICON_INFO", g."IMG_URL", g."USE_YN", g."INDEX_YN",
  to_char(g."SYS_REG_DTM" at time zone 'UTC', ${ISO}) as "SYS_REG_DTM",
  to_char(g."SYS_MOD_DTM" at time zone 'UTC', ${ISO}) as "SYS_MOD_DTM"`;

/** The action line's target: the product's _id and its external version (an older state never overwrites a newer one). */
const target = (goodsNo: string, version: string) => `'{"_id":' || to_json(${goodsNo})::text || ',"version":' || ${version} || ',"version_type":"external"}}'`;

/** The document `d` of the goods row `g`, to join after it (PostgreSQL folds it into the row's own scan). */
export const DOCUMENT = `lateral (select ${DOCUMENT_FIELDS}) d`;

/** The index action and the document `d` of the goods row `g`, at the row's version. */
export const INDEX_LINES = `'{"index":' || ${target(`g."GOODS_NO"`, `g."INDEX_VERSION"`)} || chr(10) || row_to_json(d)::text || chr(10)`;

/** The delete action of a product, at the version of the change that removed it. */
export const deleteLine = (goodsNo: string, version: string) => `'{"delete":' || ${target(goodsNo, version)} || chr(10)`;

/** The bulk lines of every product the mode indexes. */
export function goodsQuery(mode: IndexingMode, intervalMinutes?: number): RowQuery {
  const from = `select ${INDEX_LINES} from "PR_GOODS_SEARCH_INTF" g cross join ${DOCUMENT} where g."USE_YN" = 'Y'`;
  switch (mode) {
    case "full":
      return { sql: from };
    case "cursor":
      return { sql: `${from} and g."INDEX_YN" = 'N'` };
    case "incremental":
      return { sql: `${from} and g."SYS_MOD_DTM" >= now() - make_interval(mins => $1)`, bindings: [minutesOf(intervalMinutes)] };
  }
}

/**
 * The delete lines of the products of the mode's window that left the index: USE_YN='N' rows
 * (cursor: not yet handled; incremental: modified in the window) and deleted rows recorded by the
 * delete trigger whose GOODS_NO has not come back. Full mode rebuilds, so it has none.
 */
export function removalQuery(mode: "cursor" | "incremental", intervalMinutes?: number): RowQuery {
  const window = mode === "cursor" ? `g."INDEX_YN" = 'N'` : `g."SYS_MOD_DTM" >= now() - make_interval(mins => $1)`;
  return {
    sql: `select ${deleteLine(`g."GOODS_NO"`, `g."INDEX_VERSION"`)} from "PR_GOODS_SEARCH_INTF" g where g."USE_YN" = 'N' and ${window}
          union all
          select ${deleteLine("d.goods_no", "d.version")} from goods_index_deleted d
           where not exists (select 1 from "PR_GOODS_SEARCH_INTF" g where g."GOODS_NO" = d.goods_no)`,
    bindings: mode === "incremental" ? [minutesOf(intervalMinutes)] : undefined,
  };
}

function minutesOf(intervalMinutes: number | undefined): number {
  if (intervalMinutes === undefined || !Number.isInteger(intervalMinutes) || intervalMinutes < 1) {
    throw new RangeError(`incremental mode needs a whole number of minutes, got ${intervalMinutes}`);
  }
  return intervalMinutes;
}
