import type { JsonObject } from "@bufbuild/protobuf";
import { excerpt, InvalidInputError } from "../../../errors.js";
import { ENDPOINT_ROUTINGS, type EndpointRouting } from "../../../module.js";
import { parseCustomConfig } from "../../creation/custom-config.js";
import { findTemplate, listTemplates } from "../../creation/templates.js";
import { DEFAULT_CAPACITY, validCapacity, type CapacityInput, type CapacityMarkets } from "./endpoint-capacity.js";
import type { AutoscaleSettings, NewEndpoint, TokenPrice } from "./endpoint-store.js";

// Validation of endpoint requests (SPEC.md section 2, "Endpoints"): bad input is a 400 naming
// the field, and changes nothing.

export const NAME_PATTERN = /^[a-z][a-z0-9-]{0,39}$/;
export const MAX_REPLICAS = 16;

function bad(field: string, message: string): InvalidInputError {
  return new InvalidInputError(message, { extra: { field } });
}

export function validName(name: string): string {
  if (!NAME_PATTERN.test(name)) {
    throw bad("name", `name must match ${NAME_PATTERN.source} (a lowercase letter, then up to 39 lowercase letters, digits or '-'), got '${excerpt(name)}'`);
  }
  return name;
}

export function validReplicas(replicas: number | undefined, required: boolean): number | undefined {
  if (replicas === undefined) {
    if (required) throw bad("replicas", `replicas is required (0..${MAX_REPLICAS}), or autoscale`);
    return undefined;
  }
  if (!Number.isInteger(replicas) || replicas < 0 || replicas > MAX_REPLICAS) {
    throw bad("replicas", `replicas must be an integer from 0 to ${MAX_REPLICAS}, got ${replicas}`);
  }
  return replicas;
}

export function validBudget(maxCostPerHour: number | undefined, required: boolean): number | undefined {
  if (maxCostPerHour === undefined) {
    if (required) throw bad("max_cost_per_hour", "max_cost_per_hour is required (dollars per hour, > 0)");
    return undefined;
  }
  if (!Number.isFinite(maxCostPerHour) || maxCostPerHour <= 0) {
    throw bad("max_cost_per_hour", `max_cost_per_hour must be a number > 0 (dollars per hour), got ${maxCostPerHour}`);
  }
  return maxCostPerHour;
}

/** How requests choose a replica: absent on a POST, `prefix`. */
export function validRouting(routing: string | undefined): EndpointRouting {
  if (routing === undefined) return "prefix";
  if (!(ENDPOINT_ROUTINGS as readonly string[]).includes(routing)) {
    throw bad("routing", `routing must be one of ${ENDPOINT_ROUTINGS.join(", ")}, got '${excerpt(routing)}'`);
  }
  return routing as EndpointRouting;
}

/** The bounds of each autoscale setting, and the default of those that have one (SPEC.md). */
export const AUTOSCALE_BOUNDS = {
  min_replicas: { min: 0, max: MAX_REPLICAS },
  max_replicas: { min: 1, max: MAX_REPLICAS },
  target_in_flight: { min: 1, max: 1000, default: 4 },
  scale_up_after_s: { min: 0, max: 3600, default: 30 },
  scale_down_after_s: { min: 30, max: 86_400, default: 600 },
} as const satisfies Record<string, { min: number; max: number; default?: number }>;

type AutoscaleKey = keyof typeof AUTOSCALE_BOUNDS;

/** The autoscale settings as a request gives them: each optional. */
export interface AutoscaleInput {
  minReplicas?: number;
  maxReplicas?: number;
  targetInFlight?: number;
  scaleUpAfterS?: number;
  scaleDownAfterS?: number;
}

function setting(key: AutoscaleKey, value: number | undefined): number {
  const bounds: { min: number; max: number; default?: number } = AUTOSCALE_BOUNDS[key];
  const field = `autoscale.${key}`;
  if (value === undefined) {
    if (bounds.default === undefined) throw bad(field, `${field} is required (${bounds.min}..${bounds.max})`);
    return bounds.default;
  }
  if (!Number.isInteger(value) || value < bounds.min || value > bounds.max) {
    throw bad(field, `${field} must be an integer from ${bounds.min} to ${bounds.max}, got ${value}`);
  }
  return value;
}

/** Validates autoscale settings, filling in the defaults of those omitted. */
export function validAutoscale(input: AutoscaleInput): AutoscaleSettings {
  const minReplicas = setting("min_replicas", input.minReplicas);
  const maxReplicas = setting("max_replicas", input.maxReplicas);
  if (maxReplicas < minReplicas) {
    throw bad("autoscale.max_replicas", `autoscale.max_replicas must be >= autoscale.min_replicas (${minReplicas}), got ${maxReplicas}`);
  }
  return {
    minReplicas,
    maxReplicas,
    targetInFlight: setting("target_in_flight", input.targetInFlight),
    scaleUpAfterS: setting("scale_up_after_s", input.scaleUpAfterS),
    scaleDownAfterS: setting("scale_down_after_s", input.scaleDownAfterS),
  };
}

/** A token price as a request gives it: both prices required, each dollars per million tokens >= 0. */
export function validTokenPrice(input: { inputPerMtok: number; outputPerMtok: number }): TokenPrice {
  for (const [field, value] of [
    ["token_price.input_per_mtok", input.inputPerMtok],
    ["token_price.output_per_mtok", input.outputPerMtok],
  ] as const) {
    if (!Number.isFinite(value) || value < 0 || value > MAX_TOKEN_PRICE) {
      throw bad(field, `${field} must be dollars per million tokens from 0 to ${MAX_TOKEN_PRICE}, got ${value}`);
    }
  }
  return { inputPerMtok: input.inputPerMtok, outputPerMtok: input.outputPerMtok };
}

/** The highest token price, dollars per million tokens: far above any model's, and its micro-dollars per token stay exact. */
const MAX_TOKEN_PRICE = 1_000_000;

/** With autoscale, replicas is the autoscaler's to set: a caller who gives both meant two things. */
export function replicasWithAutoscale(): InvalidInputError {
  return bad("replicas", "replicas is the autoscaler's target while autoscale is on: give autoscale (min_replicas, max_replicas) or replicas, not both");
}

/** Validates a POST; `market` tells whether interruptible capacity can be rented at all. */
export function newEndpointOf(
  request: {
    name: string;
    templateName: string;
    replicas?: number;
    maxCostPerHour?: number;
    customConfig?: JsonObject;
    autoscale?: AutoscaleInput;
    capacity?: CapacityInput;
    tokenPrice?: { inputPerMtok: number; outputPerMtok: number };
    routing?: string;
  },
  market: CapacityMarkets,
): NewEndpoint {
  const name = validName(request.name);
  if (!request.templateName) throw bad("template_name", "template_name is required");
  const template = findTemplate(request.templateName);
  if (!template) {
    const names = listTemplates().map((t) => t.name).join(", ");
    throw bad("template_name", `Template '${excerpt(request.templateName)}' not found; templates: ${names}`);
  }
  if (request.autoscale && request.replicas !== undefined) throw replicasWithAutoscale();
  const autoscale = request.autoscale ? validAutoscale(request.autoscale) : null;
  // An autoscaled endpoint starts at its minimum: the load raises it from there.
  const replicas = autoscale ? autoscale.minReplicas : validReplicas(request.replicas, true)!;
  const maxCostPerHour = validBudget(request.maxCostPerHour, true)!;
  const customConfig = request.customConfig ?? {};
  parseCustomConfig(customConfig, true);
  const capacity = request.capacity ? validCapacity(request.capacity, market) : { ...DEFAULT_CAPACITY };
  const tokenPrice = request.tokenPrice ? validTokenPrice(request.tokenPrice) : null;
  const routing = validRouting(request.routing);
  return { name, templateName: template.name, replicas, maxCostPerHour, customConfig, autoscale, capacity, tokenPrice, routing };
}
