import { IndexingService } from "../../gen/search/v1/indexing_service_pb.js";
import type { ModuleDeps, ServiceModule } from "../module.js";
import { registration } from "../server/service-registration.js";
import { createIndexingMetrics } from "./indexing-metrics.js";
import { createIndexingService } from "./indexing-service.js";
import { createIndexingWiring } from "./indexing-wiring.js";
import { createJobLock } from "./job-lock.js";
import { databaseUrlOf } from "../db/knex.js";

/** IndexingService with its background work (cron runner) and the job lock they share. */
export function createIndexingModule(deps: ModuleDeps): ServiceModule {
  const { config, knex, elasticsearch, logger } = deps;
  const jobLock = createJobLock({ databaseUrl: databaseUrlOf(knex), logger });
  const metrics = createIndexingMetrics(deps.metrics.registry, jobLock);
  const wiring = createIndexingWiring({ knex, elasticsearch, logger, indexing: config.indexing, batch: config.batch, jobLock, metrics });
  const service = createIndexingService({
    knex,
    elasticsearch,
    logger,
    indexing: config.indexing,
    runs: wiring.runs,
    metrics,
    batch: wiring.batch,
    batchLogs: wiring.logs,
  });
  return {
    service: registration(IndexingService, service),
    async start() {
      wiring.cron.start();
    },
    async stop() {
      // No new ticks; a running job is aborted, its finally blocks restore index settings and
      // release the cursor, and the cron tick that started it then ends.
      const cronStopped = wiring.cron.stop();
      await jobLock.abortAndWait();
      await cronStopped;
    },
  };
}
