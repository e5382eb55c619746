// Korea Standard Time stamps, for batch ids and physical index names. KST has no daylight saving,
// so a fixed +9 hours offset is exact and no time-zone database is needed.
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
