import pino, { type Logger } from "pino";
import { loadConfig } from "../../../src/config.js";
import { createMarketplace, type Marketplace } from "../../../src/gpu/marketplace/index.js";
import { createTestElasticsearch } from "../elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../postgres.js";
import { startTestServer, type TestServer } from "../server.js";
import { startVastEmulator, type EmulatorOptions, type VastEmulator } from "./emulator.js";

// GpuService with MARKETPLACE=vastai against the emulator, its adapter built from the
// configuration exactly as `npm start` builds it, on a database of its own.

export interface VastService {
  vast: VastEmulator;
  db: TestDatabase;
  marketplace: Marketplace;
  server: TestServer;
  close(): Promise<void>;
}

/** `env` adds to (or overrides) MARKETPLACE, VAST_API_KEY and VAST_API_URL; `logger`: the service's (silent without). */
export async function startVastService(emulator: EmulatorOptions, env: Record<string, string>, logger?: Logger): Promise<VastService> {
  const vast = await startVastEmulator(emulator);
  const db = await createTestDatabase();
  const fullEnv = { MARKETPLACE: "vastai", VAST_API_KEY: emulator.apiKey, VAST_API_URL: vast.url, ...env };
  const marketplace = createMarketplace(loadConfig(fullEnv), pino({ level: "silent" }));
  const server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace, env: fullEnv, logger });
  return {
    vast,
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
