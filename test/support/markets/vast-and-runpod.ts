import pino, { type Logger } from "pino";
import { loadConfig } from "../../../src/config.js";
import { createMarketplace, type Marketplace } from "../../../src/gpu/marketplace/index.js";
import { createTestElasticsearch } from "../elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../postgres.js";
import { startRunpodEmulator, type RunpodEmulator } from "../runpod/emulator.js";
import { startTestServer, type TestServer } from "../server.js";
import { startVastEmulator, type EmulatorOptions, type VastEmulator } from "../vastai/emulator.js";

// GpuService on two real-world markets at once, MARKETPLACE=vastai,runpod: vast.ai's emulator and
// RunPod's, each speaking its documented wire format, the composite built from the configuration
// exactly as `npm start` builds it, on a database of its own.

export interface VastRunpodService {
  vast: VastEmulator;
  runpod: RunpodEmulator;
  db: TestDatabase;
  marketplace: Marketplace;
  server: TestServer;
  close(): Promise<void>;
}

export const RUNPOD_TEST_KEY = "rpa_two_markets_0123456789";

/** `env` adds to (or overrides) the settings below. */
export async function startVastRunpodService(env: Record<string, string> = {}, logger?: Logger): Promise<VastRunpodService> {
  const emulator: EmulatorOptions = { apiKey: "vast-and-runpod-key", provisioningMs: 150, loadingMs: 150 };
  const vast = await startVastEmulator(emulator);
  const runpod = await startRunpodEmulator({ apiKey: RUNPOD_TEST_KEY, provisioningMs: 150, startingMs: 150, portLagMs: 150 });
  const db = await createTestDatabase();
  const fullEnv = {
    MARKETPLACE: "vastai,runpod",
    VAST_API_KEY: emulator.apiKey,
    VAST_API_URL: vast.url,
    VAST_MIN_INTERVAL_MS: "0",
    VAST_CREATE_TIMEOUT_MS: "2000",
    VAST_BACKOFF_MS: "5",
    VAST_RETRIES: "1",
    RUNPOD_API_KEY: RUNPOD_TEST_KEY,
    RUNPOD_API_URL: runpod.url,
    MARKETPLACE_TIMEOUT_MS: "1500",
    GPU_PROBE_TIMEOUT_MS: "500",
    ...env,
  };
  const marketplace = createMarketplace(loadConfig(fullEnv), pino({ level: "silent" }), db.knex);
  const server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace, env: fullEnv, logger });
  return {
    vast,
    runpod,
    db,
    marketplace,
    server,
    async close() {
      await server.close();
      await marketplace.close();
      await db.drop();
      await runpod.close();
      await vast.close();
    },
  };
}
