import type { BulkItem } from "./pipeline/bulk-sender.js";
import type { RowQuery } from "./pipeline/row-reader.js";

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
}

/** The row's version as read: cursor finalize flips it only if it is still this version. */
export interface GoodsKey {
  readonly goodsNo: string;
  /** SYS_MOD_DTM as read, RFC 3339 text (exact: the column has millisecond precision). */
  readonly modDtm: string;
}

// Timestamps leave PostgreSQL as RFC 3339 UTC text with milliseconds: the document needs that
// text anyway, and parsing a million Date objects only to print them again costs CPU and memory.
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;
const COLUMNS = `"GOODS_NO", "GOODS_NM", "BRAND_NM", "CATE_CD", "CATE_PATH", "SALE_PRICE", "PROMO_PRICE",
  "ICON_INFO", "IMG_URL", "USE_YN", "INDEX_YN",
  to_char("SYS_REG_DTM" at time zone 'UTC', ${ISO}) as "SYS_REG_DTM",
  to_char("SYS_MOD_DTM" at time zone 'UTC', ${ISO}) as "SYS_MOD_DTM"`;

export function goodsQuery(mode: IndexingMode, intervalMinutes?: number): RowQuery {
  const from = `select ${COLUMNS} from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`;
  switch (mode) {
    case "full":
      return { sql: from };
    case "cursor":
      return { sql: `${from} and "INDEX_YN" = 'N'` };
    case "incremental":
      if (intervalMinutes === undefined || !Number.isInteger(intervalMinutes) || intervalMinutes < 1) {
        throw new RangeError(`incremental mode needs a whole number of minutes, got ${intervalMinutes}`);
      }
      return { sql: `${from} and "SYS_MOD_DTM" >= now() - make_interval(mins => $1)`, bindings: [intervalMinutes] };
  }
}

export function goodsItem(row: GoodsRow): BulkItem<GoodsKey> {
  return {
    id: row.GOODS_NO,
    // The row is already the document: same field names, timestamps as text.
    document: row as unknown as Record<string, unknown>,
    meta: { goodsNo: row.GOODS_NO, modDtm: row.SYS_MOD_DTM },
  };
}
