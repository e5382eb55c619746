import type { JsonObject } from "@bufbuild/protobuf";
import { InvalidInputError } from "../../errors.js";

// custom_config accepts exactly five keys; anything else is refused with the accepted list,
// so that a typo never silently creates an instance with defaults.

export const CUSTOM_CONFIG_KEYS = ["llm_max_model_len", "llm_gpu_memory_utilization", "auto_destroy", "max_hours", "max_cost"] as const;

export interface CustomConfig {
  llmMaxModelLen?: number;
  llmGpuMemoryUtilization?: number;
  autoDestroy?: boolean;
  /** Uptime in hours at which the sync loop destroys the instance. */
  maxHours?: number;
  /** Total cost in dollars at which the sync loop destroys the instance. */
  maxCost?: number;
}

/** Keys that configure the model server, which only instances created from a template run. */
const MODEL_SERVER_KEYS = new Set(["llm_max_model_len", "llm_gpu_memory_utilization"]);

const ACCEPTED =
  "accepted keys: llm_max_model_len (integer > 0), llm_gpu_memory_utilization (number, 0 < x <= 1), auto_destroy (boolean), max_hours (number > 0), max_cost (number > 0, dollars)";

function bad(message: string, key: string): InvalidInputError {
  return new InvalidInputError(`custom_config: ${message}; ${ACCEPTED}`, { extra: { field: `custom_config.${key}` } });
}

/**
 * Validates custom_config. Without a template the instance runs no model server, so the two
 * model-server keys are refused there rather than ignored.
 */
export function parseCustomConfig(json: JsonObject | undefined, hasTemplate: boolean): CustomConfig {
  const config: CustomConfig = {};
  for (const [key, value] of Object.entries(json ?? {})) {
    switch (key) {
      case "llm_max_model_len":
        if (typeof value !== "number" || !Number.isInteger(value) || value <= 0 || value > 2 ** 31 - 1) {
          throw bad(`llm_max_model_len must be an integer > 0, got ${JSON.stringify(value)}`, key);
        }
        config.llmMaxModelLen = value;
        break;
      case "llm_gpu_memory_utilization":
        if (typeof value !== "number" || !(value > 0 && value <= 1)) {
          throw bad(`llm_gpu_memory_utilization must be a number with 0 < x <= 1, got ${JSON.stringify(value)}`, key);
        }
        config.llmGpuMemoryUtilization = value;
        break;
      case "auto_destroy":
        if (typeof value !== "boolean") throw bad(`auto_destroy must be true or false, got ${JSON.stringify(value)}`, key);
        config.autoDestroy = value;
        break;
      case "max_hours":
        config.maxHours = positive(key, value);
        break;
      case "max_cost":
        config.maxCost = positive(key, value);
        break;
      default:
        throw bad(`unknown key '${key}'`, key);
    }
    if (!hasTemplate && MODEL_SERVER_KEYS.has(key)) {
      throw bad(`'${key}' configures the model server, which only instances created from a template run`, key);
    }
  }
  return config;
}

function positive(key: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw bad(`${key} must be a number > 0, got ${JSON.stringify(value)}`, key);
  }
  return value;
}
