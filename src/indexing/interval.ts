import { InvalidInputError } from "../errors.js";
import type { IndexingMode } from "./goods/goods-rows.js";

/**
 * The `interval` parameter of IndexGoods (SPEC.md section 3): absent or empty is full, "1" is
 * cursor (not one minute), a whole number N >= 2 is incremental over the last N minutes. The value
 * is taken exactly as sent: spaces, signs, decimals, exponents, leading zeros and words are 400.
 */
export function parseInterval(interval: string | undefined): { mode: IndexingMode; intervalMinutes?: number } {
  const value = interval ?? "";
  if (value === "") return { mode: "full" };
  if (/^[1-9]\d{0,6}$/.test(value)) {
    const minutes = Number(value);
    if (minutes === 1) return { mode: "cursor" };
    if (minutes >= 2) return { mode: "incremental", intervalMinutes: minutes };
  }
  throw new InvalidInputError(
    `interval must be empty (full), 1 (cursor) or a whole number of minutes >= 2 (incremental), got '${interval}'`,
    { extra: { field: "interval" } },
  );
}
