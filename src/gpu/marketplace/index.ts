import type { Knex } from "knex";
import type { Logger } from "pino";
import { MARKET_NAMES, type Config, type MarketName } from "../../config.js";
import { redactUrl } from "../../logger.js";
import { createSeveralMarkets } from "./markets/several-markets.js";
import type { Marketplace } from "./port.js";
import { createRemoteMarketplace } from "./remote/remote.js";
import { createRunpodMarketplace } from "./runpod/runpod.js";
import { createSimulatedMarketplace } from "./simulated/simulated.js";
import { createPgSimStore } from "./simulated/simulated-store.js";
import { createVastMarketplace } from "./vastai/vastai.js";

export type { Marketplace } from "./port.js";
export type { SimulatedMarketplace } from "./simulated/simulated.js";

/**
 * The markets the configuration names (MARKETPLACE, in order of preference), behind one port
 * (markets/several-markets.ts). Given the service's database, the simulated marketplace keeps
 * its instances there.
 */
export function createMarketplace(config: Config, logger: Logger, knex?: Knex): Marketplace {
  const markets = config.marketplace.markets.map((name) => ({ name, marketplace: createAdapter(name, config, logger, knex) }));
  return createSeveralMarkets({ markets, timeoutMs: config.marketplace.timeoutMs, knownMarkets: MARKET_NAMES, logger: logger.child({ component: "marketplace" }) });
}

function createAdapter(name: MarketName, config: Config, logger: Logger, knex?: Knex): Marketplace {
  const settings = config.marketplace;
  const child = logger.child({ component: "marketplace", market: name });
  switch (name) {
    case "remote":
      // loadConfig guarantees both when remote; checked again so a hand-built Config fails clearly.
      if (!settings.url || !settings.apiKey) throw new Error("MARKETPLACE_URL and MARKETPLACE_API_KEY are required when MARKETPLACE names remote");
      logger.info({ marketplace: "remote", url: redactUrl(settings.url) }, "marketplace");
      return createRemoteMarketplace({ baseUrl: settings.url, apiKey: settings.apiKey, timeoutMs: settings.timeoutMs, retries: settings.retries, logger: child });
    case "vastai":
      if (!settings.vastApiKey) throw new Error("VAST_API_KEY is required when MARKETPLACE names vastai");
      logger.info({ marketplace: "vastai", url: redactUrl(settings.vastApiUrl) }, "marketplace");
      return createVastMarketplace({
        baseUrl: settings.vastApiUrl,
        apiKey: settings.vastApiKey,
        timeoutMs: settings.timeoutMs,
        createTimeoutMs: settings.vastCreateTimeoutMs,
        createLookupMs: settings.vastCreateLookupMs,
        minReliability: settings.vastMinReliability,
        minIntervalMs: settings.vastMinIntervalMs,
        retries: settings.vastRetries,
        backoffMs: settings.vastBackoffMs,
        maxBackoffMs: settings.vastBackoffMs * 16,
        logger: child,
      });
    case "runpod":
      if (!settings.runpodApiKey) throw new Error("RUNPOD_API_KEY is required when MARKETPLACE names runpod");
      logger.info({ marketplace: "runpod", url: redactUrl(settings.runpodApiUrl) }, "marketplace");
      return createRunpodMarketplace({
        baseUrl: settings.runpodApiUrl,
        apiKey: settings.runpodApiKey,
        timeoutMs: settings.timeoutMs,
        retries: settings.retries,
        logger: child,
      });
    case "simulated":
      logger.info({ marketplace: "simulated" }, "marketplace");
      return createSimulatedMarketplace({
        creatingMs: settings.simCreatingMs,
        loadingMs: settings.simLoadingMs,
        modelServerStartMs: settings.simModelServerStartMs,
        preemptPerHour: settings.simPreemptPerHour,
        prefillMsPerKtoken: settings.simPrefillMsPerKtoken,
        kvCacheTokens: settings.simKvCacheTokens,
        store: knex ? createPgSimStore(knex) : undefined,
      });
  }
}
