import type { Client } from "@elastic/elasticsearch";
import { ACTOR_CRON } from "../actor.js";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { BatchConfig, IndexingConfig } from "../config.js";
import { BatchLogStore } from "./batch/batch-log.js";
import { PRODUCT_BATCH_JOB } from "./batch/batch-record.js";
import { createBatchService, type BatchService } from "./batch/batch-service.js";
import { incrementalWindowMinutes } from "./goods/index-runs.js";
import type { IndexingMetrics } from "./indexing-metrics.js";
import type { JobLock } from "./job-lock.js";
import { createIndexingRuns, type IndexingRuns } from "./run.js";
import { createCronRunner, type CronJob, type CronRunner } from "./schedule.js";

// Builds the indexing runs (run.ts), the batch service, its log store and the cron runner over the
// indexing module's dependencies and its job lock, so that the module only has to hand them to
// IndexingService and start and stop the runner. Every run below goes through `runs`.

export interface IndexingWiringDeps {
  knex: Knex;
  elasticsearch: Client;
  logger: Logger;
  indexing: IndexingConfig;
  batch: BatchConfig;
  jobLock: JobLock;
  metrics?: IndexingMetrics;
}

export interface IndexingWiring {
  runs: IndexingRuns;
  batch: BatchService;
  logs: BatchLogStore;
  cron: CronRunner;
}

export function createIndexingWiring(deps: IndexingWiringDeps): IndexingWiring {
  const { knex, elasticsearch, logger, indexing, jobLock, metrics } = deps;
  const runs = createIndexingRuns({ knex, elasticsearch, logger, indexing, jobLock, metrics });
  const logs = BatchLogStore.create({ elasticsearch, index: deps.batch.logIndex });
  const batch = createBatchService({
    knex,
    lock: jobLock,
    // Step 2, under the batch's lock. A full load truncated the table: it rebuilds, so vanished products leave search.
    indexCursor: ({ bulkSize, signal, rebuild, actor }) => runs.runHeld({ mode: "cursor", job: PRODUCT_BATCH_JOB, rebuild, bulkSize, actor }, signal),
    logs,
    goodsIndex: indexing.goodsIndex,
    logger,
    metrics,
  });

  const { cronIncrementalMinutes, cronIncrementalOverlapMinutes } = deps.batch;
  const jobs: CronJob[] = [
    { name: PRODUCT_BATCH_JOB, expression: deps.batch.cronBatch, run: () => batch.run({ actor: ACTOR_CRON }) },
    {
      name: "index_goods_incremental",
      expression: deps.batch.cronIncremental,
      // Covers since the start of the last successful run (persisted), so a skipped tick or a restart loses no row.
      run: () =>
        runs.run({
          mode: "incremental",
          actor: ACTOR_CRON,
          intervalMinutes: () => incrementalWindowMinutes(knex, cronIncrementalMinutes, cronIncrementalOverlapMinutes),
        }),
    },
  ];
  const cron = createCronRunner({ jobs: deps.batch.cronEnabled ? jobs : [], logger: logger.child({ component: "cron" }) });
  return { runs, batch, logs, cron };
}
