import type { BulkItem } from "../pipeline/bulk-sender.js";
import type { RowQuery } from "../pipeline/row-reader.js";

// What each mode reads from PR_GOODS_SEARCH_INTF (SPEC.md section 3), and how a row becomes a
// document. No ORDER BY: one cursor over one snapshot sees every selected row exactly once, and
// sorting a million rows would only delay the first bulk.

export type IndexingMode = "full" | "incremental" | "cursor";

export interface GoodsRow {
  GOODS_NO: string;
  GOODS_NM: string;
  BRAND_NM: string | null;
  CATE_CD: string | null;
  CATE_PATH: string | null;
  SALE_PRICE: number;
  PROMO_PRICE: number | null;
  ICON_INFO: string | null;
  IMG_URL: string | null;
  USE_YN: string;
  INDEX_YN: string;
  /** RFC 3339 UTC with milliseconds, e.g. 2026-11-21T23:00:00.123Z. */
  SYS_REG_DTM: string;
  SYS_MOD_DTM: string;
  /** The row's external version (bigint as text); not part of the document. */
  INDEX_VERSION?: string;
}

/** The row's version as read: cursor finalize flips it only if it is still this version. */
export interface GoodsKey {
  readonly goodsNo: string;
  /** SYS_MOD_DTM as read, RFC 3339 text (exact: the column has millisecond precision). */
  readonly modDtm: string;
  /** What was read: an eligible row, a USE_YN='N' row, or a record of goods_index_deleted (modDtm is then its deleted_at). */
  readonly source: "row" | "delisted" | "deleted";
}

/** A product whose document must leave the index, as the removal query reads it. */
export interface RemovalRow {
  GOODS_NO: string;
  STAMP: string;
  SOURCE: "delisted" | "deleted";
  /** The version of the change that removed it: the row's, or the tombstone's. */
  VERSION: string;
}

// Timestamps leave PostgreSQL as RFC 3339 UTC text with milliseconds: the document needs that
// text anyway, and parsing a million Date objects only to print them again costs CPU and memory.
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;
/** The document's columns and the row's version, as every reader selects them. */
export const COLUMNS = `"GOODS_NO", "GOODS_NM", "BRAND_NM", "CATE_CD", "CATE_PATH", "SALE_PRICE", "PROMO_PRICE",
  "ICON_INFO", "IMG_URL", "USE_YN", "INDEX_YN",
  to_char("SYS_REG_DTM" at time zone 'UTC', ${ISO}) as "SYS_REG_DTM",
  to_char("SYS_MOD_DTM" at time zone 'UTC', ${ISO}) as "SYS_MOD_DTM", "INDEX_VERSION"`;

export function goodsQuery(mode: IndexingMode, intervalMinutes?: number): RowQuery {
  const from = `select ${COLUMNS} from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`;
  switch (mode) {
    case "full":
      return { sql: from };
    case "cursor":
      return { sql: `${from} and "INDEX_YN" = 'N'` };
    case "incremental":
      return { sql: `${from} and "SYS_MOD_DTM" >= now() - make_interval(mins => $1)`, bindings: [minutesOf(intervalMinutes)] };
  }
}

/**
 * Products of the mode's window that left the index: USE_YN='N' rows (cursor: not yet handled;
 * incremental: modified in the window) and deleted rows recorded by the delete trigger whose
 * GOODS_NO has not come back. Full mode rebuilds, so it has none.
 */
export function removalQuery(mode: "cursor" | "incremental", intervalMinutes?: number): RowQuery {
  const window = mode === "cursor" ? `"INDEX_YN" = 'N'` : `"SYS_MOD_DTM" >= now() - make_interval(mins => $1)`;
  return {
    sql: `select "GOODS_NO", to_char("SYS_MOD_DTM" at time zone 'UTC', ${ISO}) as "STAMP", 'delisted' as "SOURCE", "INDEX_VERSION" as "VERSION"
            from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'N' and ${window}
          union all
          select d.goods_no, to_char(d.deleted_at at time zone 'UTC', ${ISO}), 'deleted', d.version
            from goods_index_deleted d
           where not exists (select 1 from "PR_GOODS_SEARCH_INTF" g where g."GOODS_NO" = d.goods_no)`,
    bindings: mode === "incremental" ? [minutesOf(intervalMinutes)] : undefined,
  };
}

export function goodsItem(row: GoodsRow): BulkItem<GoodsKey> {
  const version = row.INDEX_VERSION;
  // JSON.stringify leaves out undefined properties: cheaper than a copy without the version, or
  // a delete, which would turn every row into a slower dictionary-mode object.
  row.INDEX_VERSION = undefined;
  return {
    id: row.GOODS_NO,
    // The row is already the document: same field names, timestamps as text.
    document: row as unknown as Record<string, unknown>,
    version,
    meta: { goodsNo: row.GOODS_NO, modDtm: row.SYS_MOD_DTM, source: "row" },
  };
}

/** A delete of the product's document, at the version of the change that removed it. */
export function removalItem(row: RemovalRow): BulkItem<GoodsKey> {
  return { id: row.GOODS_NO, version: row.VERSION, meta: { goodsNo: row.GOODS_NO, modDtm: row.STAMP, source: row.SOURCE } };
}

function minutesOf(intervalMinutes: number | undefined): number {
  if (intervalMinutes === undefined || !Number.isInteger(intervalMinutes) || intervalMinutes < 1) {
    throw new RangeError(`incremental mode needs a whole number of minutes, got ${intervalMinutes}`);
  }
  return intervalMinutes;
}
