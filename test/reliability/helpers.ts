import type { Client } from "@elastic/elasticsearch";

/**
 * Documents Elasticsearch has written to the index so far, refreshed or not: a full run turns
 * refreshes off, so `count` would say 0 until it ends.
 */
export async function documentsWritten(es: Client, index: string): Promise<number> {
  if (!(await es.indices.exists({ index }))) return 0;
  const stats = await es.indices.stats({ index, metric: "indexing" });
  return stats._all.primaries?.indexing?.index_total ?? 0;
}
