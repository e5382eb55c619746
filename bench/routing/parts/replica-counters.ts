// The prefix-cache counters of an endpoint's replicas, read from each model server's /metrics under
// vLLM's names (prompt tokens asked for, and found cached), so that a phase's hit rate is the
// difference of two readings.
import { metricSample } from "../../shared/support.js";

export interface CacheCounters {
  queries: number;
  hits: number;
}

/** The counters summed over the replicas at `urls`; a replica that does not answer counts nothing. */
export async function readCounters(urls: string[]): Promise<CacheCounters> {
  const each = await Promise.all(urls.map((url) => fetch(`${url}/metrics`).then((res) => res.text()).then(parseCounters, () => ({ queries: 0, hits: 0 }))));
  return each.reduce((sum, c) => ({ queries: sum.queries + c.queries, hits: sum.hits + c.hits }), { queries: 0, hits: 0 });
}

function parseCounters(text: string): CacheCounters {
  const value = (name: string) => metricSample(text, `vllm:${name}_total`) ?? 0;
  return { queries: value("prefix_cache_queries"), hits: value("prefix_cache_hits") };
}

/** Hits over queries between two readings; 0 when nothing was asked. */
export function hitRate(before: CacheCounters, after: CacheCounters): number {
  const queries = after.queries - before.queries;
  return queries > 0 ? (after.hits - before.hits) / queries : 0;
}
