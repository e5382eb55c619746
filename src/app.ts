import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { Config } from "./config.js";
import { createGpuModule } from "./gpu/gpu-module.js";
import { createIndexingModule } from "./indexing/indexing-module.js";
import { createAppHandler, type NodeHandler, type ServiceRegistration } from "./server/app.js";

export interface AppDeps {
  config: Config;
  logger: Logger;
  knex: Knex;
  elasticsearch: Client;
}

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
  const modules = [createGpuModule(deps), createIndexingModule(deps)];
  const handler = createAppHandler({
    services: modules.map((m) => m.service),
    logger,
    authTokens: config.authTokens,
    maxBodyBytes: config.maxBodyBytes,
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
