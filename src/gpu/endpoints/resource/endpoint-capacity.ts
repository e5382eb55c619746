import { InvalidInputError } from "../../../errors.js";
import type { CapacitySettings } from "./endpoint-store.js";

// The capacity settings of an endpoint (SPEC.md section 2, "Interruptible replicas with
// on-demand fallback"): their bounds and defaults, their validation (a 400 naming
// `capacity.<field>`), and their words in events. on_demand_base is how many replicas are
// always on-demand (SkyServe's base_ondemand_fallback_replicas); with interruptible off every
// replica is on-demand whatever it says.

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
});

/** The capacity settings as a request gives them: each optional. */
export interface CapacityInput {
  interruptible?: boolean;
  onDemandBase?: number;
  fallback?: boolean;
  bidMargin?: number;
}

/** What the validation needs of the marketplace: whether it rents interruptible machines. */
export interface CapacityMarket {
  readonly interruptible?: boolean;
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

/**
 * Validates capacity settings, filling in the defaults of those omitted, and refuses
 * interruptible replicas on a marketplace that has none to rent.
 */
export function validCapacity(input: CapacityInput, market: CapacityMarket): CapacitySettings {
  const settings: CapacitySettings = {
    interruptible: input.interruptible ?? DEFAULT_CAPACITY.interruptible,
    onDemandBase: bounded("on_demand_base", input.onDemandBase, DEFAULT_CAPACITY.onDemandBase),
    fallback: input.fallback ?? DEFAULT_CAPACITY.fallback,
    bidMargin: bounded("bid_margin", input.bidMargin, DEFAULT_CAPACITY.bidMargin),
  };
  if (settings.interruptible && market.interruptible !== true) {
    throw bad(
      "capacity.interruptible",
      "capacity.interruptible cannot be true: this marketplace rents no interruptible machines (vast.ai and the simulated marketplace do)",
    );
  }
  return settings;
}

/** Capacity settings in an event's words: "interruptible, 1 on-demand base, fallback, bid margin 0.25". */
export function capacitySummary(c: CapacitySettings): string {
  return `${c.interruptible ? "interruptible" : "on-demand"}, ${c.onDemandBase} on-demand base, ${c.fallback ? "fallback" : "no fallback"}, bid margin ${c.bidMargin}`;
}

export function isDefaultCapacity(c: CapacitySettings): boolean {
  return capacitySummary(c) === capacitySummary(DEFAULT_CAPACITY);
}
