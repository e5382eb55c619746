import type { JsonObject } from "@bufbuild/protobuf";
import type { ApiHints } from "../../server/openapi/api-hints.js";
import { BUDGET_DURATIONS } from "../../server/keys/key-store.js";
import { NAME_PATTERN as ENDPOINT_NAME } from "../endpoints/resource/endpoint-request.js";
import { KEY_NAME_PATTERN, MAX_GRACE_S, USAGE_WINDOWS } from "./key-request.js";

// What the key RPCs' validation enforces beyond the protos, from the constants it enforces it
// with (src/server/openapi/api-hints.ts).

const positive: JsonObject = { minimum: 1 };
const settings = (message: string): Record<string, JsonObject> => ({
  [`gpu.v1.${message}.endpoints`]: { items: { type: "string", pattern: ENDPOINT_NAME.source } },
  [`gpu.v1.${message}.max_budget`]: { exclusiveMinimum: 0 },
  [`gpu.v1.${message}.budget_duration`]: { enum: [...BUDGET_DURATIONS] },
  [`gpu.v1.${message}.rpm_limit`]: positive,
  [`gpu.v1.${message}.tpm_limit`]: positive,
  [`gpu.v1.${message}.max_parallel_requests`]: positive,
});

export const KEY_API_HINTS: ApiHints = {
  fields: {
    "gpu.v1.CreateKeyRequest.name": { pattern: KEY_NAME_PATTERN.source },
    ...settings("CreateKeyRequest"),
    ...settings("UpdateKeyRequest"),
    "gpu.v1.UpdateKeyRequest.update_mask": { examples: ["rpmLimit", "endpoints,maxBudget"] },
    "gpu.v1.RotateKeyRequest.grace_s": { minimum: 0, maximum: MAX_GRACE_S, default: 0 },
    "gpu.v1.GetKeyUsageRequest.window": { enum: Object.keys(USAGE_WINDOWS), default: "24h" },
    "gpu.v1.GetKeyUsageRequest.endpoint": { pattern: ENDPOINT_NAME.source },
    "gpu.v1.TokenPrice.input_per_mtok": { minimum: 0 },
    "gpu.v1.TokenPrice.output_per_mtok": { minimum: 0 },
  },
  errors: {
    "gpu.v1.GpuService.CreateKey": [409, 429],
  },
};
