import type { JsonObject } from "@bufbuild/protobuf";
import type { ApiHints } from "../server/openapi/api-hints.js";
import { DEFAULT_LIMIT, MAX_LIMIT, OFFER_SORT_KEYS } from "./marketplace/offers.js";
import { INSTANCE_SORT_KEYS } from "./store/page-token.js";
import { SHOWN_MARKET_STATUSES, STORED_STATUSES } from "./store/status.js";
import { listTemplates } from "./creation/templates.js";
import { EVENT_KINDS } from "./endpoints/resource/endpoint-events.js";
import { AUTOSCALE_BOUNDS, MAX_REPLICAS, NAME_PATTERN } from "./endpoints/resource/endpoint-request.js";
import { CAPACITY_BOUNDS, DEFAULT_CAPACITY } from "./endpoints/resource/endpoint-capacity.js";
import { ENDPOINT_STATES, REPLICA_STATES } from "./endpoints/replicas/replica-state.js";
import { ENDPOINT_ROUTINGS } from "../module.js";

// What GpuService's validation enforces beyond the protos, from the constants it enforces it with
// (src/server/openapi/api-hints.ts).

const limit: JsonObject = { minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT };
const nonNegative: JsonObject = { minimum: 0 };
const templateNames: JsonObject = { examples: listTemplates().map((t) => t.name) };
const endpointName: JsonObject = { pattern: NAME_PATTERN.source };
const replicas: JsonObject = { minimum: 0, maximum: MAX_REPLICAS };
const budget: JsonObject = { exclusiveMinimum: 0 };
const routing: JsonObject = { enum: [...ENDPOINT_ROUTINGS] };
const autoscale = (key: keyof typeof AUTOSCALE_BOUNDS): JsonObject => {
  const bounds: { min: number; max: number; default?: number } = AUTOSCALE_BOUNDS[key];
  return { minimum: bounds.min, maximum: bounds.max, ...(bounds.default !== undefined ? { default: bounds.default } : {}) };
};

const capacity = (key: keyof typeof CAPACITY_BOUNDS): JsonObject => ({ minimum: CAPACITY_BOUNDS[key].min, maximum: CAPACITY_BOUNDS[key].max });

/** The keys custom_config accepts (custom-config.ts), with the bounds it checks. */
export const CUSTOM_CONFIG_SCHEMA: JsonObject = {
  type: "object",
  properties: {
    llm_max_model_len: { type: "integer", exclusiveMinimum: 0, maximum: 2 ** 31 - 1, description: "Only with a template." },
    llm_gpu_memory_utilization: { type: "number", exclusiveMinimum: 0, maximum: 1, description: "Only with a template." },
    auto_destroy: { type: "boolean", description: "Destroy the instance as soon as it is seen exited." },
    max_hours: { type: "number", exclusiveMinimum: 0, description: "The sync loop destroys the instance once its uptime reaches this many hours." },
    max_cost: { type: "number", exclusiveMinimum: 0, description: "The sync loop destroys the instance once its total cost reaches this many dollars." },
  },
  additionalProperties: false,
};

export const GPU_API_HINTS: ApiHints = {
  fields: {
    "gpu.v1.ListOffersRequest.max_price": nonNegative,
    "gpu.v1.SearchOffersRequest.max_price": nonNegative,
    "gpu.v1.SearchOffersRequest.min_gpu_ram": nonNegative,
    "gpu.v1.SearchOffersRequest.num_gpus": { minimum: 1 },
    "gpu.v1.SearchOffersRequest.sort_by": { enum: [...OFFER_SORT_KEYS], default: "price" },
    "gpu.v1.SearchOffersRequest.limit": limit,
    "gpu.v1.SortInfo.sort_by": { enum: [...OFFER_SORT_KEYS] },
    "gpu.v1.SortInfo.order": { enum: ["ascending", "descending"] },
    "gpu.v1.GetTemplateRequest.template_name": templateNames,
    "gpu.v1.CreateInstanceFromTemplateRequest.template_name": templateNames,
    "gpu.v1.CreateInstanceRequest.template_name": templateNames,
    "gpu.v1.FromTemplateBody.custom_config": CUSTOM_CONFIG_SCHEMA,
    "gpu.v1.CreateInstanceRequest.custom_config": CUSTOM_CONFIG_SCHEMA,
    "gpu.v1.Instance.status": { enum: [...STORED_STATUSES] },
    "gpu.v1.ListInstancesRequest.status_filter": { enum: [...STORED_STATUSES] },
    "gpu.v1.ListInstancesRequest.sort_by": { enum: [...INSTANCE_SORT_KEYS], default: "created_at" },
    "gpu.v1.ListInstancesRequest.limit": limit,
    "gpu.v1.BasicStatus.status": { enum: [...SHOWN_MARKET_STATUSES] },
    "gpu.v1.EnhancedBasicStatus.status": { enum: [...SHOWN_MARKET_STATUSES] },
    "gpu.v1.DbInfo.status": { enum: [...STORED_STATUSES] },
    "gpu.v1.ListInstanceLogsRequest.limit": limit,
    "gpu.v1.CreateEndpointRequest.name": endpointName,
    "gpu.v1.CreateEndpointRequest.template_name": templateNames,
    "gpu.v1.CreateEndpointRequest.replicas": replicas,
    "gpu.v1.CreateEndpointRequest.max_cost_per_hour": budget,
    "gpu.v1.CreateEndpointRequest.custom_config": CUSTOM_CONFIG_SCHEMA,
    "gpu.v1.CreateEndpointRequest.routing": { ...routing, default: "prefix" },
    "gpu.v1.UpdateEndpointRequest.routing": routing,
    "gpu.v1.Endpoint.routing": routing,
    "gpu.v1.UpdateEndpointRequest.replicas": replicas,
    "gpu.v1.UpdateEndpointRequest.max_cost_per_hour": budget,
    "gpu.v1.UpdateEndpointRequest.update_mask": { examples: ["autoscale", "capacity", "routing", "replicas,maxCostPerHour"] },
    "gpu.v1.EndpointAutoscale.min_replicas": autoscale("min_replicas"),
    "gpu.v1.EndpointAutoscale.max_replicas": autoscale("max_replicas"),
    "gpu.v1.EndpointAutoscale.target_in_flight": autoscale("target_in_flight"),
    "gpu.v1.EndpointAutoscale.scale_up_after_s": autoscale("scale_up_after_s"),
    "gpu.v1.EndpointAutoscale.scale_down_after_s": autoscale("scale_down_after_s"),
    "gpu.v1.EndpointCapacity.interruptible": { default: DEFAULT_CAPACITY.interruptible },
    "gpu.v1.EndpointCapacity.on_demand_base": { ...capacity("on_demand_base"), default: DEFAULT_CAPACITY.onDemandBase },
    "gpu.v1.EndpointCapacity.fallback": { default: DEFAULT_CAPACITY.fallback },
    "gpu.v1.EndpointCapacity.bid_margin": { ...capacity("bid_margin"), default: DEFAULT_CAPACITY.bidMargin },
    "gpu.v1.EndpointCapacity.markets": { examples: [["vastai", "runpod"]] },
    "gpu.v1.EndpointCapacity.spread_markets": { default: DEFAULT_CAPACITY.spreadMarkets },
    "gpu.v1.ListEndpointEventsRequest.limit": limit,
    "gpu.v1.Endpoint.state": { enum: [...ENDPOINT_STATES] },
    "gpu.v1.EndpointInstance.state": { enum: [...REPLICA_STATES] },
    "gpu.v1.EndpointEvent.kind": { enum: [...EVENT_KINDS] },
  },
  requiredParams: ["gpu.v1.CreateInstanceFromTemplateRequest.template_name"],
  errors: {
    "gpu.v1.GpuService.CreateInstanceFromTemplate": [404, 409, 429],
    "gpu.v1.GpuService.CreateInstance": [404, 409, 429],
    "gpu.v1.GpuService.CreateEndpoint": [409],
  },
};
