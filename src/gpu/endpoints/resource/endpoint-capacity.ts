import { excerpt, InvalidInputError } from "../../../errors.js";
import { directoryOf } from "../../marketplace/markets/market-directory.js";
import type { Marketplace } from "../../marketplace/port.js";
import type { CapacitySettings } from "./endpoint-store.js";

// The capacity settings of an endpoint (SPEC.md section 2, "Interruptible replicas with
// on-demand fallback"): their bounds and defaults, their validation (a 400 naming
// `capacity.<field>`), and their words in events. on_demand_base is how many replicas are
// always on-demand (SkyServe's base_ondemand_fallback_replicas); with interruptible off every
// replica is on-demand whatever it says. `markets` (SPEC.md, "Several marketplaces") narrows the
// configured markets its replicas are rented on; empty means every one.

/** The bounds of the numeric settings, and the default of each setting (SPEC.md). */
export const CAPACITY_BOUNDS = {
  on_demand_base: { min: 0, max: 16, integer: true },
  bid_margin: { min: 0, max: 1, integer: false },
} as const;

/** What an endpoint has when never given capacity, and what `"capacity": null` puts back. */
export const DEFAULT_CAPACITY: Readonly<CapacitySettings> = Object.freeze({
  interruptible: false,
  onDemandBase: 0,
  fallback: true,
  bidMargin: 0.25,
  markets: Object.freeze([]) as readonly string[],
  spreadMarkets: false,
});

/** The capacity settings as a request gives them: each optional. */
export interface CapacityInput {
  interruptible?: boolean;
  onDemandBase?: number;
  fallback?: boolean;
  bidMargin?: number;
  markets?: readonly string[];
  spreadMarkets?: boolean;
}

/** What the validation needs of the marketplace: its markets, and which of them rent interruptible machines (bids). */
export interface CapacityMarkets {
  readonly markets: readonly { readonly market: string; readonly interruptible: boolean }[];
}

export function capacityMarketsOf(marketplace: Marketplace): CapacityMarkets {
  return { markets: directoryOf(marketplace).states().map(({ market, interruptible }) => ({ market, interruptible })) };
}

function bad(field: string, message: string): InvalidInputError {
  return new InvalidInputError(message, { extra: { field } });
}

function bounded(key: keyof typeof CAPACITY_BOUNDS, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const { min, max, integer } = CAPACITY_BOUNDS[key];
  const field = `capacity.${key}`;
  if (!Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < min || value > max) {
    throw bad(field, `${field} must be ${integer ? "an integer" : "a number"} from ${min} to ${max}, got ${value}`);
  }
  return value;
}

/** The configured markets named, each once, in the order given; an unknown name is a 400 naming capacity.markets. */
function validMarkets(names: readonly string[] | undefined, configured: CapacityMarkets): string[] {
  const known = configured.markets.map((m) => m.market);
  const markets: string[] = [];
  for (const name of names ?? []) {
    if (!known.includes(name)) {
      throw bad("capacity.markets", `capacity.markets names '${excerpt(name)}', which is not a configured market; configured: ${known.join(", ")}`);
    }
    if (!markets.includes(name)) markets.push(name);
  }
  return markets;
}

/**
 * Validates capacity settings, filling in the defaults of those omitted, and refuses
 * interruptible replicas where no market it may rent on has any to rent.
 */
export function validCapacity(input: CapacityInput, configured: CapacityMarkets): CapacitySettings {
  const settings: CapacitySettings = {
    interruptible: input.interruptible ?? DEFAULT_CAPACITY.interruptible,
    onDemandBase: bounded("on_demand_base", input.onDemandBase, DEFAULT_CAPACITY.onDemandBase),
    fallback: input.fallback ?? DEFAULT_CAPACITY.fallback,
    bidMargin: bounded("bid_margin", input.bidMargin, DEFAULT_CAPACITY.bidMargin),
    markets: validMarkets(input.markets, configured),
    spreadMarkets: input.spreadMarkets ?? DEFAULT_CAPACITY.spreadMarkets,
  };
  if (settings.interruptible) {
    const rentsBids = (names: readonly string[]) => configured.markets.some((m) => m.interruptible && (names.length === 0 || names.includes(m.market)));
    if (!rentsBids([])) {
      throw bad(
        "capacity.interruptible",
        "capacity.interruptible cannot be true: this marketplace rents no interruptible machines (vast.ai and the simulated marketplace do)",
      );
    }
    if (!rentsBids(settings.markets)) {
      throw bad(
        "capacity.markets",
        `capacity.markets (${settings.markets.join(", ")}) names no market that rents interruptible machines, and capacity.interruptible is true`,
      );
    }
  }
  return settings;
}

/** Capacity settings in an event's words: "interruptible, 1 on-demand base, fallback, bid margin 0.25". */
export function capacitySummary(c: CapacitySettings): string {
  const markets = (c.markets.length > 0 ? `, markets ${c.markets.join(", ")}` : "") + (c.spreadMarkets ? ", spread over markets" : "");
  return `${c.interruptible ? "interruptible" : "on-demand"}, ${c.onDemandBase} on-demand base, ${c.fallback ? "fallback" : "no fallback"}, bid margin ${c.bidMargin}${markets}`;
}

export function isDefaultCapacity(c: CapacitySettings): boolean {
  return capacitySummary(c) === capacitySummary(DEFAULT_CAPACITY);
}
