import type { Logger } from "pino";
import { startMarketService, type MarketService } from "../markets/market-service.js";
import type { EmulatorOptions, VastEmulator } from "./emulator.js";

// GpuService with MARKETPLACE=vastai against the emulator.

export interface VastService extends MarketService {
  vast: VastEmulator;
}

/** `env` adds to (or overrides) MARKETPLACE, VAST_API_KEY and VAST_API_URL; `logger`: the service's (silent without). */
export async function startVastService(emulator: EmulatorOptions, env: Record<string, string>, logger?: Logger): Promise<VastService> {
  const service = await startMarketService({ vast: emulator, env: { MARKETPLACE: "vastai", ...env }, logger });
  return { ...service, vast: service.vast! };
}
