import { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import pino, { type Logger } from "pino";
import { BatchLogStore } from "../../../src/indexing/batch/batch-log.js";
import { createBatchService, type BatchService, type CursorIndexer } from "../../../src/indexing/batch/batch-service.js";
import { createJobLock, type JobLock } from "../../../src/indexing/job-lock.js";
import { runGoodsIndexing } from "../../../src/indexing/modes.js";
import { deleteGoodsIndices } from "../helpers.js";
import { uniqueIndexName } from "../../support/elasticsearch.js";

// The batch service over the real PostgreSQL and Elasticsearch, with its own goods and log
// indexes. Step 2 is the real cursor-mode indexing; `cursorIndexer` builds it for any client, so
// a test can point step 2 alone at an unreachable search engine.

export interface BatchHarness {
  batch: BatchService;
  lock: JobLock;
  logs: BatchLogStore;
  goodsIndex: string;
  logIndex: string;
  /** Bulk sizes step 2 was called with. */
  bulkSizes: number[];
}

const created: string[] = [];

/** Deletes every index the harnesses of this test file created. */
export async function deleteHarnessIndexes(elasticsearch: Client): Promise<void> {
  const names = created.splice(0);
  await deleteGoodsIndices(elasticsearch, ...names);
}

export function cursorIndexer(knex: Knex, elasticsearch: Client, index: string, logger: Logger): CursorIndexer {
  return ({ bulkSize, signal, rebuild }) =>
    runGoodsIndexing({ knex, elasticsearch, logger, mode: "cursor", rebuild, index, fetchSize: 50_000, bulkSize, bulkMaxBytes: 10 * 1024 * 1024, bulksInFlight: 2, signal });
}

export function createBatchHarness(options: {
  knex: Knex;
  databaseUrl: string;
  elasticsearch: Client;
  /** Step 2 instead of the real cursor indexing on `elasticsearch`. */
  indexCursor?: (real: CursorIndexer) => CursorIndexer;
  lock?: JobLock;
  logger?: Logger;
}): BatchHarness {
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });
  const goodsIndex = uniqueIndexName("goods_batch");
  const logIndex = uniqueIndexName("batch_log");
  created.push(goodsIndex, logIndex);
  const lock = options.lock ?? createJobLock({ databaseUrl: options.databaseUrl, logger });
  const logs = BatchLogStore.create({ elasticsearch: options.elasticsearch, index: logIndex });
  const real = cursorIndexer(options.knex, options.elasticsearch, goodsIndex, logger);
  const step2 = options.indexCursor ? options.indexCursor(real) : real;
  const bulkSizes: number[] = [];
  const indexCursor: CursorIndexer = (o) => {
    bulkSizes.push(o.bulkSize);
    return step2(o);
  };
  const batch = createBatchService({ knex: options.knex, lock, indexCursor, logs, goodsIndex, logger });
  return { batch, lock, logs, goodsIndex, logIndex, bulkSizes };
}

/** A client whose every request fails to connect: nothing listens on port 1. */
export function unreachableElasticsearch(): Client {
  return new Client({ node: "http://127.0.0.1:1", requestTimeout: 2000, maxRetries: 0 });
}
