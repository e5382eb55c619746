import pino, { type Logger } from "pino";
import { createSeveralMarkets, type SeveralMarkets } from "../../../src/gpu/marketplace/markets/several-markets.js";
import { createSimulatedMarketplace, type SimulatedMarketplace, type SimulatedMarketplaceOptions } from "../../../src/gpu/marketplace/simulated/simulated.js";

// Two simulated markets behind the composite, as the service sees several markets: the first
// rents bids as vast.ai does, the second rents on-demand machines only, from pools, and stands for
// RunPod (no RunPod adapter or emulator is involved: it is the simulated marketplace under another
// name, with another catalogue, whose offers renting never takes, as RunPod's catalogue entries).
// A bench and test construction only: MARKETPLACE names each market once.

export const BID_MARKET = "simulated";
export const ON_DEMAND_MARKET = "simulated-ondemand";
/** The second market's catalogue seed: other hosts and prices than the first's. */
const ON_DEMAND_CATALOGUE_SEED = 20261128;

export interface TwoSimulatedMarkets {
  /** What the service rents from: both markets, in this order of preference. */
  marketplace: SeveralMarkets;
  /** The vast.ai-like market (bids and on-demand): the one a test or bench runs dry or preempts. */
  bids: SimulatedMarketplace;
  /** The on-demand-only market of pools standing for RunPod. */
  onDemand: SimulatedMarketplace;
}

/** `options` for both markets (clocks, catalogue size); the second's catalogue seed is its own. */
export function createTwoSimulatedMarkets(options: SimulatedMarketplaceOptions, timeoutMs = 5_000, logger: Logger = pino({ level: "silent" })): TwoSimulatedMarkets {
  const bids = createSimulatedMarketplace(options);
  // The options' own properties copied as they are: a getter (a bench's cold start drawn per rental) stays a getter.
  const second = Object.defineProperties({}, Object.getOwnPropertyDescriptors(options)) as SimulatedMarketplaceOptions;
  const onDemand = createSimulatedMarketplace(Object.assign(second, { bids: false, pools: true, catalogue: { ...options.catalogue, seed: ON_DEMAND_CATALOGUE_SEED } }));
  const marketplace = createSeveralMarkets({
    markets: [
      { name: BID_MARKET, marketplace: bids },
      { name: ON_DEMAND_MARKET, marketplace: onDemand },
    ],
    timeoutMs,
    logger,
  });
  return { marketplace, bids, onDemand };
}
