import { isIsoInstant, type InstanceSortKey } from "./page-token.js";

// The SQL pieces of one instance listing order: the expression sorted on (always descending,
// then instance_id descending), its text form carried in page tokens, and the check that a
// token's value has that form, so that a forged token is a 400 and never a SQL error.

export interface SortSql {
  /** Expression to order by; `?` (if any) is the listing's as-of instant. */
  order: string;
  /** Text form of the sort value for the token. */
  key: string;
  /** Cast applied to the token's value when comparing. */
  cast: string;
  usesAsOf: boolean;
  isValidKey(value: string): boolean;
}

const UPTIME_US = "(extract(epoch from (coalesce(destroyed_at, ?::timestamptz) - created_at)) * 1000000)::bigint";

export const SORT_SQL: Record<InstanceSortKey, SortSql> = {
  created_at: {
    order: "created_at",
    key: `to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`,
    cast: "timestamptz",
    usesAsOf: false,
    isValidKey: (v) => isIsoInstant(v, 6),
  },
  cost_per_hour: {
    order: "cost_per_hour",
    key: "cost_per_hour::text",
    cast: "double precision",
    usesAsOf: false,
    isValidKey: isFloat8Text,
  },
  uptime: {
    order: UPTIME_US,
    key: `${UPTIME_US}::text`,
    cast: "bigint",
    usesAsOf: true,
    isValidKey: (v) => /^-?\d{1,18}$/.test(v),
  },
};

/**
 * A number PostgreSQL reads as double precision: finite, and not a non-zero value so small that
 * it underflows to zero (PostgreSQL refuses "1e-400" as out of range, JavaScript reads it as 0).
 */
function isFloat8Text(text: string): boolean {
  if (!/^-?\d+(\.\d+)?(e[-+]?\d+)?$/i.test(text)) return false;
  const value = Number(text);
  const mantissa = text.split(/e/i)[0]!;
  return Number.isFinite(value) && (value !== 0 || !/[1-9]/.test(mantissa));
}
