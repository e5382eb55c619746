import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { BatchConfig, IndexingConfig } from "../../config.js";
import type { IndexingMetrics } from "../indexing-metrics.js";
import type { JobLock } from "../job-lock.js";
import { incrementalWindowMinutes } from "../goods/index-runs.js";
import { runGoodsIndexing } from "../modes.js";
import { createCronRunner, type CronJob, type CronRunner } from "../schedule.js";
import { BatchLogStore } from "./batch-log.js";
import { PRODUCT_BATCH_JOB } from "./batch-record.js";
import { createBatchService, type BatchService, type CursorIndexer } from "./batch-service.js";

// Builds the batch service, its log store and the cron runner over the indexing module's
// dependencies and its job lock, so that the module only has to hand them to IndexingService and
// start and stop the runner.

export interface BatchWiringDeps {
  knex: Knex;
  elasticsearch: Client;
  logger: Logger;
  indexing: IndexingConfig;
  batch: BatchConfig;
  jobLock: JobLock;
  metrics?: IndexingMetrics;
}

export interface BatchWiring {
  batch: BatchService;
  logs: BatchLogStore;
  cron: CronRunner;
}

export function createBatchWiring(deps: BatchWiringDeps): BatchWiring {
  const { knex, elasticsearch, logger, indexing, jobLock, metrics } = deps;
  const pipeline = {
    knex,
    elasticsearch,
    logger,
    metrics,
    index: indexing.goodsIndex,
    fetchSize: indexing.fetchSize,
    bulkMaxBytes: indexing.bulkMaxBytes,
    bulksInFlight: indexing.bulksInFlight,
    analyzer: indexing.goodsAnalyzer,
    channelCapacity: indexing.channelCapacity > 0 ? indexing.channelCapacity : undefined,
  };
  // A full load truncated the table: its indexing step rebuilds, so vanished products leave search.
  const indexCursor: CursorIndexer = ({ bulkSize, signal, rebuild }) =>
    runGoodsIndexing({ ...pipeline, mode: "cursor", rebuild, job: PRODUCT_BATCH_JOB, bulkSize, signal });
  const logs = BatchLogStore.create({ elasticsearch, index: deps.batch.logIndex });
  const batch = createBatchService({ knex, lock: jobLock, indexCursor, logs, goodsIndex: indexing.goodsIndex, logger, metrics });

  const jobs: CronJob[] = [
    { name: PRODUCT_BATCH_JOB, expression: deps.batch.cronBatch, run: () => batch.run({}) },
    {
      name: "index_goods_incremental",
      expression: deps.batch.cronIncremental,
      // Covers since the start of the last successful run (persisted), so a skipped tick or a restart loses no row.
      run: () =>
        jobLock.run("index_goods_incremental", async (signal) => {
          const { cronIncrementalMinutes, cronIncrementalOverlapMinutes } = deps.batch;
          const intervalMinutes = await incrementalWindowMinutes(knex, cronIncrementalMinutes, cronIncrementalOverlapMinutes);
          return runGoodsIndexing({ ...pipeline, mode: "incremental", intervalMinutes, bulkSize: indexing.bulkSize, signal });
        }),
    },
  ];
  const cron = createCronRunner({ jobs: deps.batch.cronEnabled ? jobs : [], logger: logger.child({ component: "cron" }) });
  return { batch, logs, cron };
}
