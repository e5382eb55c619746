import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { runPipeline } from "../../../src/indexing/pipeline/pipeline.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";

// A mapping function that throws fails the run with its own error, promptly, instead of leaving
// the pipeline waiting for ever (and its caller holding the job lock).

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_mapper_error");

afterAll(async () => {
  await es.indices.delete({ index, ignore_unavailable: true });
  await es.close();
});

/** Rows 1..count in batches of 100, as a cursor hands them out. */
async function* rows(count: number): AsyncGenerator<number[]> {
  for (let i = 1; i <= count; i += 100) yield Array.from({ length: Math.min(100, count - i + 1) }, (_, k) => i + k);
}

describe("a throwing mapper", () => {
  it("fails the run with the mapper's error", async () => {
    const bug = new Error("mapper bug at row 150");
    const run = runPipeline<number, number>({
      source: rows(1_000),
      toItem: (row) => {
        if (row === 150) throw bug;
        return { id: String(row), document: { n: row }, meta: row };
      },
      channelCapacity: 20,
      sender: { client: es, index, bulkSize: 50, maxBytes: 1024 * 1024, concurrency: 1 },
      logger: pino({ level: "silent" }),
      progressIntervalMs: 60_000,
    });
    const outcome = await Promise.race([
      run.then(() => "resolved", (err: unknown) => err),
      new Promise((resolve) => setTimeout(() => resolve("still running after 10 s"), 10_000)),
    ]);
    expect(outcome).toBe(bug);
  }, 20_000);
});
