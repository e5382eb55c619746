import { IndexingService } from "../../gen/search/v1/indexing_service_pb.js";
import type { ModuleDeps, ServiceModule } from "../module.js";
import { registration } from "../server/service-registration.js";
import { createIndexingMetrics } from "./indexing-metrics.js";
import { createIndexingService } from "./indexing-service.js";
import { createIndexingWiring } from "./indexing-wiring.js";
import { createJobLock } from "./job-lock.js";
import { databaseUrlOf } from "../db/knex.js";
import { createLiveFollower, type LiveFollower } from "./live/live-follower.js";
import { registerLiveMetrics } from "./live/live-metrics.js";

/** IndexingService with its background work (cron runner, live follower) and the job lock the jobs share. */
export function createIndexingModule(deps: ModuleDeps): ServiceModule {
  const { config, knex, elasticsearch, logger } = deps;
  const jobLock = createJobLock({ databaseUrl: databaseUrlOf(knex), logger });
  const metrics = createIndexingMetrics(deps.metrics.registry, jobLock);
  const wiring = createIndexingWiring({ knex, elasticsearch, logger, indexing: config.indexing, batch: config.batch, jobLock, metrics });
  let live: LiveFollower | undefined;
  const onApplied = registerLiveMetrics(deps.metrics.registry, () => live);
  live = createLiveFollower({
    knex,
    elasticsearch,
    logger,
    enabled: config.indexing.live,
    databaseUrl: databaseUrlOf(knex),
    alias: config.indexing.goodsIndex,
    analyzer: config.indexing.goodsAnalyzer,
    bulkMaxBytes: config.indexing.bulkMaxBytes,
    onApplied,
  });
  const service = createIndexingService({
    knex,
    elasticsearch,
    logger,
    indexing: config.indexing,
    runs: wiring.runs,
    metrics,
    batch: wiring.batch,
    batchLogs: wiring.logs,
    live,
  });
  return {
    service: registration(IndexingService, service),
    async start() {
      wiring.cron.start();
      live.start();
    },
    async stop() {
      // No new ticks; a running job is aborted, its finally blocks restore index settings and
      // release the cursor, and the cron tick that started it then ends.
      const cronStopped = wiring.cron.stop();
      await Promise.all([jobLock.abortAndWait(), live.stop()]);
      await cronStopped;
    },
  };
}
