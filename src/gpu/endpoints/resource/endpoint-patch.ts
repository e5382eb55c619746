import type { UpdateEndpointRequest } from "../../../../gen/gpu/v1/gpu_service_pb.js";
import { InvalidInputError } from "../../../errors.js";
import { DEFAULT_CAPACITY, validCapacity, type CapacityMarkets } from "./endpoint-capacity.js";
import { MAX_REPLICAS, replicasWithAutoscale, validAutoscale, validBudget, validReplicas, validRouting, validTokenPrice } from "./endpoint-request.js";
import type { EndpointChange, EndpointRecord } from "./endpoint-store.js";
import { namedFields } from "../../update-mask.js";

// A PATCH of an endpoint (SPEC.md section 2, "Endpoints" and "autoscaling"). proto3 cannot tell
// a field set to null from one left out, so the fields to change are those named in
// update_mask (REST fills it from the body's keys), or without one those that are set; a field
// named but not set is cleared, which only autoscale (off, keeping the target as the fixed count)
// and capacity (back to its defaults: every replica on-demand) and token_price (unpriced) allow.

const FIELDS = ["replicas", "max_cost_per_hour", "autoscale", "capacity", "token_price", "routing"] as const;
type Field = (typeof FIELDS)[number];

const JSON_NAMES: Readonly<Record<string, Field>> = { maxCostPerHour: "max_cost_per_hour", tokenPrice: "token_price" };

function bad(field: string, message: string): InvalidInputError {
  return new InvalidInputError(message, { extra: { field } });
}

function isSet(req: UpdateEndpointRequest, field: Field): boolean {
  if (field === "replicas") return req.replicas !== undefined;
  if (field === "max_cost_per_hour") return req.maxCostPerHour !== undefined;
  if (field === "capacity") return req.capacity !== undefined;
  if (field === "token_price") return req.tokenPrice !== undefined;
  if (field === "routing") return req.routing !== undefined;
  return req.autoscale !== undefined;
}

/**
 * Validates a PATCH on its own, before the endpoint is read: bad input is a 400 whatever the
 * endpoint. `market` tells whether interruptible capacity can be rented at all.
 */
export function patchOf(req: UpdateEndpointRequest, market: CapacityMarkets): EndpointChange {
  const named = namedFields(req.updateMask, FIELDS, JSON_NAMES, (field) => isSet(req, field));
  if (named.size === 0) {
    throw bad("replicas", "Nothing to change: give replicas, max_cost_per_hour, autoscale, capacity, token_price and/or routing");
  }
  const change: EndpointChange = {};
  if (named.has("replicas")) {
    if (req.replicas === undefined) throw bad("replicas", `replicas cannot be cleared: give a count (0..${MAX_REPLICAS})`);
    change.replicas = validReplicas(req.replicas, true);
  }
  if (named.has("max_cost_per_hour")) {
    if (req.maxCostPerHour === undefined) throw bad("max_cost_per_hour", "max_cost_per_hour cannot be cleared: give dollars per hour (> 0)");
    change.maxCostPerHour = validBudget(req.maxCostPerHour, true);
  }
  if (named.has("autoscale")) change.autoscale = req.autoscale ? validAutoscale(req.autoscale) : null;
  if (named.has("capacity")) change.capacity = req.capacity ? validCapacity(req.capacity, market) : { ...DEFAULT_CAPACITY };
  if (named.has("token_price")) change.tokenPrice = req.tokenPrice ? validTokenPrice(req.tokenPrice) : null;
  if (named.has("routing")) {
    if (req.routing === undefined) throw bad("routing", "routing cannot be cleared: give prefix or least_outstanding");
    change.routing = validRouting(req.routing);
  }
  if (change.autoscale && change.replicas !== undefined) throw replicasWithAutoscale();
  return change;
}

/** The rules that depend on the endpoint: its autoscaler owns replicas until turned off. */
export function checkPatch(change: EndpointChange, current: EndpointRecord): void {
  if (change.replicas !== undefined && current.autoscale && change.autoscale === undefined) {
    throw bad(
      "replicas",
      `replicas of '${current.name}' is its autoscaler's target: change autoscale (min_replicas, max_replicas), or turn autoscaling off with "autoscale": null`,
    );
  }
}
