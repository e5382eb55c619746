import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import { createVastMarketplace, type VastMarketplaceOptions } from "../../../src/gpu/marketplace/vastai/vastai.js";
import type { VastEmulator } from "./emulator.js";

// The vast.ai adapter on the emulator with clocks short enough for tests: 2 s timeouts, no
// pacing between calls, retries backing off from 5 ms. `options` overrides any of them.

export function adapterOn(vast: VastEmulator, apiKey: string, options: Partial<VastMarketplaceOptions> = {}): Marketplace {
  return createVastMarketplace({
    baseUrl: vast.url,
    apiKey,
    timeoutMs: 2000,
    createTimeoutMs: 2000,
    createLookupMs: 600,
    minReliability: 0.95,
    minIntervalMs: 0,
    retries: 6,
    backoffMs: 5,
    maxBackoffMs: 40,
    ...options,
  });
}
