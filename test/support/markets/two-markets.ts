import pino, { type Logger } from "pino";
import { loadConfig } from "../../../src/config.js";
import { createMarketplace, type Marketplace } from "../../../src/gpu/marketplace/index.js";
import { createTestElasticsearch } from "../elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../postgres.js";
import { startTestServer, type TestServer } from "../server.js";
import { startVastEmulator, type EmulatorOptions, type VastEmulator } from "../vastai/emulator.js";

// GpuService on two markets at once, MARKETPLACE=vastai,simulated: vast.ai's emulator and the
// simulated market (its instances in the service's database, on a clock of a few hundred ms),
// the composite built from the configuration exactly as `npm start` builds it.

export interface TwoMarketService {
  vast: VastEmulator;
  /** The emulator's options: a test may rotate `apiKey` to revoke the service's key. */
  emulator: EmulatorOptions;
  db: TestDatabase;
  marketplace: Marketplace;
  server: TestServer;
  close(): Promise<void>;
}

export async function startTwoMarketService(env: Record<string, string> = {}, logger?: Logger): Promise<TwoMarketService> {
  const emulator: EmulatorOptions = { apiKey: "two-markets-vast-key", provisioningMs: 150, loadingMs: 150 };
  const vast = await startVastEmulator(emulator);
  const db = await createTestDatabase();
  const fullEnv = {
    MARKETPLACE: "vastai,simulated",
    VAST_API_KEY: emulator.apiKey,
    VAST_API_URL: vast.url,
    VAST_MIN_INTERVAL_MS: "0",
    VAST_CREATE_TIMEOUT_MS: "2000",
    VAST_BACKOFF_MS: "5",
    VAST_RETRIES: "1",
    MARKETPLACE_TIMEOUT_MS: "1500",
    SIM_CREATING_MS: "150",
    SIM_LOADING_MS: "150",
    SIM_MODEL_SERVER_START_MS: "100",
    GPU_PROBE_TIMEOUT_MS: "500",
    ...env,
  };
  const marketplace = createMarketplace(loadConfig(fullEnv), pino({ level: "silent" }), db.knex);
  const server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace, env: fullEnv, logger });
  return {
    vast,
    emulator,
    db,
    marketplace,
    server,
    async close() {
      await server.close();
      await marketplace.close();
      await db.drop();
      await vast.close();
    },
  };
}
