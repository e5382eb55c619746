import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { toBulkLines, type BulkLines } from "../../../src/indexing/pipeline/bulk-lines.js";
import { runPipeline } from "../../../src/indexing/pipeline/pipeline.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";

// An item that is not bulk lines (a bug in the query that writes them) fails the run with a clear
// error, promptly, instead of leaving the pipeline waiting for ever (and its caller holding the
// job lock).

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_mapper_error");

afterAll(async () => {
  await es.indices.delete({ index, ignore_unavailable: true });
  await es.close();
});

/** Items 1..count in batches of 100, as a cursor hands them out; item 150 lacks its final newline. */
async function* items(count: number): AsyncGenerator<BulkLines> {
  for (let i = 1; i <= count; i += 100) {
    yield toBulkLines(Array.from({ length: Math.min(100, count - i + 1) }, (_, k) => `{"index":{"_id":"${i + k}"}}\n{"n":${i + k}}${i + k === 150 ? "" : "\n"}`));
  }
}

describe("an item that is not bulk lines", () => {
  it("fails the run with an error that says so", async () => {
    const run = runPipeline({
      source: items(1_000),
      channelCapacity: 20,
      sender: { client: es, index, bulkSize: 50, maxBytes: 1024 * 1024, concurrency: 1 },
      logger: pino({ level: "silent" }),
      progressIntervalMs: 60_000,
    });
    const outcome = await Promise.race([
      run.then(() => "resolved", (err: unknown) => err),
      new Promise((resolve) => setTimeout(() => resolve("still running after 10 s"), 10_000)),
    ]);
    expect(outcome).toBeInstanceOf(TypeError);
    expect((outcome as Error).message).toMatch(/NDJSON lines ending in a newline/);
  }, 20_000);
});
