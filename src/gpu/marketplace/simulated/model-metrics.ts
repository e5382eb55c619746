import type { PrefixCacheCounts } from "./prefix-cache.js";

// The simulated model server's `GET /metrics`: the prefix-cache counters under vLLM's names and
// labels (vLLM 0.10 on; tokens, not requests), so that whatever reads a vLLM replica's hit rate
// (hits / queries) reads a simulated one alike.

export function prefixCacheMetrics(model: string, counts: Readonly<PrefixCacheCounts>): string {
  const labels = `{engine="0",model_name=${JSON.stringify(model)}}`;
  return [
    "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
    "# TYPE vllm:prefix_cache_queries_total counter",
    `vllm:prefix_cache_queries_total${labels} ${counts.queries.toFixed(1)}`,
    "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
    "# TYPE vllm:prefix_cache_hits_total counter",
    `vllm:prefix_cache_hits_total${labels} ${counts.hits.toFixed(1)}`,
    "",
  ].join("\n");
}
