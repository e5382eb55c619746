import { kstTimestamp } from "../kst-timestamp.js";

/** `product_` + KST execution time, e.g. `product_20261122010000123`. */
export function productBatchId(startedAt: Date): string {
  return `product_${kstTimestamp(startedAt)}`;
}
