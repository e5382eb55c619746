import { FIRST_BYTE_BOUNDS_MS } from "../../module.js";

/**
 * The q-quantile (0..1) of first-byte latencies, ms, from histogram bucket counts
 * (FIRST_BYTE_BOUNDS_MS and one more for slower), interpolated within its bucket as Prometheus's
 * histogram_quantile does; undefined with no count. Past the last bound it answers that bound:
 * "at least".
 */
export function firstByteQuantile(buckets: readonly number[], q: number): number | undefined {
  const total = buckets.reduce((sum, n) => sum + n, 0);
  if (total === 0) return undefined;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < buckets.length; i++) {
    const n = buckets[i]!;
    if (n > 0 && below + n >= rank) {
      const upper = FIRST_BYTE_BOUNDS_MS[i];
      if (upper === undefined) return FIRST_BYTE_BOUNDS_MS.at(-1)!;
      const lower = i === 0 ? 0 : FIRST_BYTE_BOUNDS_MS[i - 1]!;
      return lower + (upper - lower) * ((rank - below) / n);
    }
    below += n;
  }
  return FIRST_BYTE_BOUNDS_MS.at(-1)!;
}
