import type { Logger } from "pino";
import type { EmulatorOptions, VastEmulator } from "../vastai/emulator.js";
import { QUICK_MARKET_ENV, startMarketService, type MarketService } from "./market-service.js";

// GpuService on two markets at once, MARKETPLACE=vastai,simulated: vast.ai's emulator and the
// simulated market (its instances in the service's database, on a clock of a few hundred ms).

export interface TwoMarketService extends MarketService {
  vast: VastEmulator;
  /** The emulator's options: a test may rotate `apiKey` to revoke the service's key. */
  emulator: EmulatorOptions;
}

export async function startTwoMarketService(env: Record<string, string> = {}, logger?: Logger): Promise<TwoMarketService> {
  const emulator: EmulatorOptions = { apiKey: "two-markets-vast-key", provisioningMs: 150, loadingMs: 150 };
  const service = await startMarketService({
    vast: emulator,
    env: {
      MARKETPLACE: "vastai,simulated",
      ...QUICK_MARKET_ENV,
      SIM_CREATING_MS: "150",
      SIM_LOADING_MS: "150",
      SIM_MODEL_SERVER_START_MS: "100",
      ...env,
    },
    logger,
  });
  return { ...service, vast: service.vast!, emulator };
}
