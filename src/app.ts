import { GPU_API_HINTS } from "./gpu/api-hints.js";
import { createGpuModule } from "./gpu/gpu-module.js";
import { INDEXING_API_HINTS } from "./indexing/api-hints.js";
import { createIndexingModule } from "./indexing/indexing-module.js";
import type { AppDeps, ModuleDeps } from "./module.js";
import { createAppHandler } from "./server/app.js";
import type { NodeHandler } from "./server/node-http.js";
import { createMetrics } from "./server/metrics.js";
import { mergeApiHints } from "./server/openapi/api-hints.js";

export type { AppDeps } from "./module.js";

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
    endpoints: deps.endpoints,
    endpointFirstByteMs: config.gpu.endpointFirstByteMs,
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
