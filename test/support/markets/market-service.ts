import pino, { type Logger } from "pino";
import { loadConfig } from "../../../src/config.js";
import { createMarketplace, type Marketplace } from "../../../src/gpu/marketplace/index.js";
import { createTestElasticsearch } from "../elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../postgres.js";
import { startRunpodEmulator, type RunpodEmulator, type RunpodEmulatorOptions } from "../runpod/emulator.js";
import { startTestServer, type TestServer } from "../server.js";
import { startVastEmulator, type EmulatorOptions, type VastEmulator } from "../vastai/emulator.js";

// GpuService on the markets MARKETPLACE names, each emulated market speaking its documented wire
// format, the composite built from the configuration exactly as `npm start` builds it, on a
// database of its own. The one way the tests bring the service up on real market adapters.

export interface MarketServiceOptions {
  /** The service's settings: MARKETPLACE and the markets' own (the emulators' URLs and keys are added). */
  env: Record<string, string>;
  /** vast.ai's emulator, started when given. */
  vast?: EmulatorOptions;
  /** RunPod's emulator, started when given. */
  runpod?: RunpodEmulatorOptions;
  /** The service's logger, its markets' too (silent without). */
  logger?: Logger;
}

export interface MarketService {
  /** The emulators started, as asked. */
  vast?: VastEmulator;
  runpod?: RunpodEmulator;
  db: TestDatabase;
  marketplace: Marketplace;
  server: TestServer;
  /** The settings the service runs with. */
  env: Record<string, string>;
  close(): Promise<void>;
}

export async function startMarketService(options: MarketServiceOptions): Promise<MarketService> {
  const vast = options.vast ? await startVastEmulator(options.vast) : undefined;
  const runpod = options.runpod ? await startRunpodEmulator(options.runpod) : undefined;
  const db = await createTestDatabase();
  const env = {
    ...(vast && { VAST_API_KEY: options.vast!.apiKey, VAST_API_URL: vast.url }),
    ...(runpod && { RUNPOD_API_KEY: options.runpod!.apiKey, RUNPOD_API_URL: runpod.url }),
    ...options.env,
  };
  const marketplace = createMarketplace(loadConfig(env), options.logger ?? pino({ level: "silent" }), db.knex);
  const server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace, env, logger: options.logger });
  return {
    vast,
    runpod,
    db,
    marketplace,
    server,
    env,
    async close() {
      await server.close();
      await marketplace.close();
      await db.drop();
      await runpod?.close();
      await vast?.close();
    },
  };
}

/** Settings that keep a test's market calls quick: no vast.ai intervals, short timeouts and backoffs. */
export const QUICK_MARKET_ENV: Readonly<Record<string, string>> = {
  VAST_MIN_INTERVAL_MS: "0",
  VAST_CREATE_TIMEOUT_MS: "2000",
  VAST_BACKOFF_MS: "5",
  VAST_RETRIES: "1",
  MARKETPLACE_TIMEOUT_MS: "1500",
  GPU_PROBE_TIMEOUT_MS: "500",
};
