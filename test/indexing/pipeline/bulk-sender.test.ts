import { Client } from "@elastic/elasticsearch";
import { afterAll, describe, expect, it } from "vitest";
import { toBulkLines, type BulkLines } from "../../../src/indexing/pipeline/bulk-lines.js";
import { sendBulks, type BulkFailure } from "../../../src/indexing/pipeline/bulk-sender.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../../support/elasticsearch.js";
import { startThrottlingProxy } from "../../support/throttling-proxy.js";
import { documentCount } from "../helpers.js";

const es = createTestElasticsearch();
const indices: string[] = [];

afterAll(async () => {
  if (indices.length > 0) await es.indices.delete({ index: indices, ignore_unavailable: true });
  await es.close();
});

/** `count` documents' bulk lines in chunks of seven, as the channel hands them to the sender. */
async function* items(count: number): AsyncGenerator<BulkLines> {
  for (let i = 0; i < count; i += 7) {
    yield toBulkLines(Array.from({ length: Math.min(7, count - i) }, (_, k) => `{"index":{"_id":"doc-${i + k}"}}\n${JSON.stringify({ n: i + k, name: `document ${i + k}` })}\n`));
  }
}

/** The document number in an accepted action's _id. */
const numberOf = (id: string) => Number(id.slice("doc-".length));

describe("bulk sender", () => {
  it("retries documents answered 429 and indexes them all", async () => {
    const index = uniqueIndexName("bulk_retry");
    indices.push(index);
    const proxy = await startThrottlingProxy(elasticsearchUrl());
    proxy.throttleNext(1, "all-items");
    const client = new Client({ node: proxy.url, maxRetries: 0 });
    const accepted: number[] = [];
    try {
      const stats = await sendBulks(items(120), {
        client, index, bulkSize: 50, maxBytes: 1024 * 1024, concurrency: 1, retryDelayMs: 10,
        onAccepted: async (actions) => void accepted.push(...actions.map((a) => numberOf(a.id))),
      });
      expect(proxy.throttled).toBe(1);
      expect(stats).toMatchObject({ total: 120, successful: 120, failed: 0, retried: 50 });
      expect(accepted.sort((a, b) => a - b)).toEqual([...Array(120).keys()]);
      expect(await documentCount(es, index)).toBe(120);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  it("counts documents still throttled after the retries as failed and hands each to onDrop", async () => {
    const index = uniqueIndexName("bulk_drop");
    indices.push(index);
    const proxy = await startThrottlingProxy(elasticsearchUrl());
    proxy.throttleNext(1_000, "all-items");
    const client = new Client({ node: proxy.url, maxRetries: 0 });
    const dropped: Array<{ id: string; failure: BulkFailure }> = [];
    try {
      const stats = await sendBulks(items(30), {
        client, index, bulkSize: 10, maxBytes: 1024 * 1024, concurrency: 2, retries: 2, retryDelayMs: 5,
        onDrop: (item, failure) => dropped.push({ id: item.id, failure }),
      });
      expect(stats).toMatchObject({ total: 30, successful: 0, failed: 30, retried: 60 });
      expect(dropped).toHaveLength(30);
      expect(dropped[0]?.failure.status).toBe(429);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  it("bounds a bulk request by bytes as well as by documents", async () => {
    const index = uniqueIndexName("bulk_bytes");
    indices.push(index);
    const sizes: number[] = [];
    const stats = await sendBulks(items(100), {
      client: es, index, bulkSize: 1_000, maxBytes: 1_000, concurrency: 2,
      onAccepted: async (actions) => void sizes.push(actions.length),
    });
    expect(stats.successful).toBe(100);
    expect(stats.bulks).toBeGreaterThanOrEqual(5);
    expect(Math.max(...sizes)).toBeLessThan(100);
    expect(stats.bytes / stats.bulks).toBeLessThanOrEqual(1_000);
  });
});
