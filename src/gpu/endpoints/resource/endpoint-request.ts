import type { JsonObject } from "@bufbuild/protobuf";
import { excerpt, InvalidInputError } from "../../../errors.js";
import { parseCustomConfig } from "../../creation/custom-config.js";
import { findTemplate, listTemplates } from "../../creation/templates.js";
import type { NewEndpoint } from "./endpoint-store.js";

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
    if (required) throw bad("replicas", `replicas is required (0..${MAX_REPLICAS})`);
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

export function newEndpointOf(request: {
  name: string;
  templateName: string;
  replicas?: number;
  maxCostPerHour?: number;
  customConfig?: JsonObject;
}): NewEndpoint {
  const name = validName(request.name);
  if (!request.templateName) throw bad("template_name", "template_name is required");
  const template = findTemplate(request.templateName);
  if (!template) {
    const names = listTemplates().map((t) => t.name).join(", ");
    throw bad("template_name", `Template '${excerpt(request.templateName)}' not found; templates: ${names}`);
  }
  const replicas = validReplicas(request.replicas, true)!;
  const maxCostPerHour = validBudget(request.maxCostPerHour, true)!;
  const customConfig = request.customConfig ?? {};
  parseCustomConfig(customConfig, true);
  return { name, templateName: template.name, replicas, maxCostPerHour, customConfig };
}
