// Batch ids carry the execution time in Korea Standard Time, which has no daylight saving, so a
// fixed +9 hours offset is exact and no time-zone database is needed.
const KST_OFFSET_MS = 9 * 60 * 60 * 1000;

/** `yyyyMMddHHmmssSSS` of the given instant in KST. */
export function kstTimestamp(at: Date): string {
  const kst = new Date(at.getTime() + KST_OFFSET_MS);
  const pad = (n: number, width = 2) => String(n).padStart(width, "0");
  return (
    pad(kst.getUTCFullYear(), 4) +
    pad(kst.getUTCMonth() + 1) +
    pad(kst.getUTCDate()) +
    pad(kst.getUTCHours()) +
    pad(kst.getUTCMinutes()) +
    pad(kst.getUTCSeconds()) +
    pad(kst.getUTCMilliseconds(), 3)
  );
}

/** `product_` + KST execution time, e.g. `product_20261122010000123`. */
export function productBatchId(startedAt: Date): string {
  return `product_${kstTimestamp(startedAt)}`;
}
