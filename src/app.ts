import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import { GpuService } from "../gen/gpu/v1/gpu_service_pb.js";
import { IndexingService } from "../gen/search/v1/indexing_service_pb.js";
import type { Config } from "./config.js";
import { createGpuService } from "./gpu/gpu-service.js";
import { createIndexingService } from "./indexing/indexing-service.js";
import { createAppHandler, registration, type NodeHandler } from "./server/app.js";

export interface AppDeps {
  config: Config;
  logger: Logger;
  knex: Knex;
  elasticsearch: Client;
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
  const handler = createAppHandler({
    services: [registration(GpuService, createGpuService()), registration(IndexingService, createIndexingService())],
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
    async start() {},
    async stop() {},
  };
}
