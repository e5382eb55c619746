import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { Config } from "./config.js";
import type { CreationHooks } from "./gpu/creation.js";
import { GPU_API_HINTS } from "./gpu/api-hints.js";
import { createGpuModule } from "./gpu/gpu-module.js";
import type { Marketplace } from "./gpu/marketplace/marketplace.js";
import { INDEXING_API_HINTS } from "./indexing/api-hints.js";
import { createIndexingModule } from "./indexing/indexing-module.js";
import { createAppHandler, type NodeHandler, type ServiceRegistration } from "./server/app.js";
import { createMetrics, type Metrics } from "./server/metrics.js";
import { mergeApiHints } from "./server/openapi/api-hints.js";

export interface AppDeps {
  config: Config;
  logger: Logger;
  knex: Knex;
  elasticsearch: Client;
  marketplace: Marketplace;
  /** Test seam for fault injection in GPU instance creation. */
  gpuCreationHooks?: CreationHooks;
}

/** What each service module is built from: the app's dependencies and the metrics registry. */
export type ModuleDeps = AppDeps & { metrics: Metrics };

/** A service with the background work it owns. */
export interface ServiceModule {
  service: ServiceRegistration;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface App {
  handler: NodeHandler;
  /** Starts background work (status sync, cron). */
  start(): Promise<void>;
  /** Stops background work; running jobs finish or abort cleanly. */
  stop(): Promise<void>;
}

/** Wires both services over the given dependencies. Used by src/main.ts and by the tests. */
export function createApp(deps: AppDeps): App {
  const { config, logger, knex, elasticsearch } = deps;
  const metrics = createMetrics();
  const moduleDeps: ModuleDeps = { ...deps, metrics };
  const modules = [createGpuModule(moduleDeps), createIndexingModule(moduleDeps)];
  const handler = createAppHandler({
    services: modules.map((m) => m.service),
    logger,
    authTokens: config.authTokens,
    maxBodyBytes: config.maxBodyBytes,
    metrics,
    apiHints: mergeApiHints(GPU_API_HINTS, INDEXING_API_HINTS),
    readiness: {
      database: async () => {
        await knex.raw("select 1");
      },
      search_engine: async () => {
        await elasticsearch.cluster.health({ timeout: "1s" }, { requestTimeout: 2000, maxRetries: 0 });
      },
    },
  });
  return {
    handler,
    async start() {
      for (const module of modules) await module.start();
    },
    async stop() {
      for (const module of modules) await module.stop();
    },
  };
}
