import type { Logger } from "pino";
import type { RunpodEmulator } from "../runpod/emulator.js";
import type { VastEmulator } from "../vastai/emulator.js";
import { QUICK_MARKET_ENV, startMarketService, type MarketService } from "./market-service.js";

// GpuService on two real-world markets at once, MARKETPLACE=vastai,runpod: vast.ai's emulator and
// RunPod's, each speaking its documented wire format.

export interface VastRunpodService extends MarketService {
  vast: VastEmulator;
  runpod: RunpodEmulator;
}

export const RUNPOD_TEST_KEY = "rpa_two_markets_0123456789";

/** `env` adds to (or overrides) the settings below. */
export async function startVastRunpodService(env: Record<string, string> = {}, logger?: Logger): Promise<VastRunpodService> {
  const service = await startMarketService({
    vast: { apiKey: "vast-and-runpod-key", provisioningMs: 150, loadingMs: 150 },
    runpod: { apiKey: RUNPOD_TEST_KEY, provisioningMs: 150, startingMs: 150, portLagMs: 150 },
    env: { MARKETPLACE: "vastai,runpod", ...QUICK_MARKET_ENV, ...env },
    logger,
  });
  return { ...service, vast: service.vast!, runpod: service.runpod! };
}
