import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import pino, { type Logger } from "pino";
import { afterAll, beforeAll } from "vitest";
import { createApp, type App } from "../../src/app.js";
import { loadConfig, type Config } from "../../src/config.js";
import type { CreationHooks } from "../../src/gpu/creation/creation.js";
import type { Marketplace } from "../../src/gpu/marketplace/port.js";
import { createSimulatedMarketplace } from "../../src/gpu/marketplace/simulated/simulated.js";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createTestElasticsearch } from "./elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "./postgres.js";

export interface TestServer {
  readonly url: string;
  readonly port: number;
  readonly app: App;
  readonly marketplace: Marketplace;
  close(): Promise<void>;
}

/** A simulated marketplace on a fast clock: instances run within a few hundred milliseconds. */
export function createFastSimulatedMarketplace() {
  return createSimulatedMarketplace({ creatingMs: 150, loadingMs: 150, modelServerStartMs: 100 });
}

/**
 * The real server, with the real app on the given database and search engine, on a free loopback
 * port. The marketplace defaults to a simulated one on a fast clock, closed with the server; a
 * marketplace passed in is left to its owner.
 */
export async function startTestServer(options: {
  knex: Knex;
  elasticsearch: Client;
  env?: Record<string, string>;
  marketplace?: Marketplace;
  gpuCreationHooks?: CreationHooks;
  logger?: Logger;
}): Promise<TestServer> {
  // The cron runner and the live follower stay off unless a test turns them on: neither may touch
  // another test's data, nor write documents that a test of another mode counts.
  const config: Config = loadConfig({ PORT: "0", CRON_ENABLED: "false", INDEX_LIVE: "false", ...options.env });
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });
  const marketplace = options.marketplace ?? createFastSimulatedMarketplace();
  const app = createApp({
    config,
    logger,
    knex: options.knex,
    elasticsearch: options.elasticsearch,
    marketplace,
    gpuCreationHooks: options.gpuCreationHooks,
  });
  const server: RunningServer = await listen({ handler: app.handler, host: "127.0.0.1", port: 0 });
  await app.start();
  return {
    url: server.url,
    port: server.port,
    app,
    marketplace,
    async close() {
      await app.stop();
      await server.close(1000);
      if (!options.marketplace) await marketplace.close();
    },
  };
}

/**
 * For a test file: a fresh database and the real server on it, started before the file's tests
 * and closed (database dropped) after them. Read `db` and `server` inside tests and hooks.
 */
export function useTestServer(): { readonly db: TestDatabase; readonly server: TestServer } {
  let db: TestDatabase | undefined;
  let server: TestServer | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch() });
  });
  afterAll(async () => {
    await server?.close();
    await db?.drop();
  });
  return {
    get db() {
      if (!db) throw new Error("useTestServer: the database is ready only once the file's beforeAll ran");
      return db;
    },
    get server() {
      if (!server) throw new Error("useTestServer: the server is ready only once the file's beforeAll ran");
      return server;
    },
  };
}
