// "Any 60 s" as per-second buckets (docs/keys.md, "Allowance"). A use is put in the bucket of a
// second no earlier than the use itself, and a bucket counts until 61 s after that second starts:
// every use is counted for at least the 60 s that follow it, so a sum of the counted buckets that
// stays within a limit means no 60 s ever held more. The database keeps the buckets
// (lease-store.ts); this is the same arithmetic for the figures a caller is told.

export const WINDOW_S = 60;

export interface Bucket {
  /** Unix second the uses were put in. */
  readonly second: number;
  readonly requests: number;
  readonly tokens: number;
}

export type Measure = "requests" | "tokens";

/** Whether a bucket still counts at `nowMs`. */
export function counts(second: number, nowMs: number): boolean {
  return second >= Math.floor(nowMs / 1000) - WINDOW_S;
}

export function windowSum(buckets: readonly Bucket[], measure: Measure, nowMs: number): number {
  let sum = 0;
  for (const bucket of buckets) if (counts(bucket.second, nowMs)) sum += bucket[measure];
  return sum;
}

/**
 * Whole seconds, at least 1, after which the buckets leave room for `need` beside `others` (leased
 * elsewhere) under `limit`; the full window when nothing that ages would make room.
 */
export function secondsUntilRoom(buckets: readonly Bucket[], measure: Measure, nowMs: number, limit: number, others: number, need: number): number {
  for (let s = 1; s <= WINDOW_S + 1; s++) {
    if (windowSum(buckets, measure, nowMs + s * 1000) + others + need <= limit) return s;
  }
  return WINDOW_S + 1;
}
