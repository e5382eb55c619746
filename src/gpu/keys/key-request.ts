import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { UpdateKeyRequest } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { RESERVED_ACTORS } from "../../actor.js";
import { excerpt, InvalidInputError } from "../../errors.js";
import { BUDGET_DURATIONS, type BudgetDuration, type KeyChange, type KeySettings } from "../../server/keys/key-store.js";
import { NAME_PATTERN as ENDPOINT_NAME } from "../endpoints/resource/endpoint-request.js";
import { namedFields } from "../update-mask.js";

// Validation of key requests (SPEC.md section 2, "Keys for callers"): bad input is a 400 naming
// the field, and changes nothing. Money enters as dollars and is kept as micro-dollars.

export const KEY_NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,62}$/;
/** Live keys at most: past it a create answers 429. */
export const MAX_LIVE_KEYS = 1000;
/** The endpoints one key may list. */
const MAX_ENDPOINTS = 100;
/** The largest budget, dollars: its micro-dollars stay exact integers. */
const MAX_BUDGET = 1e9;
export const MAX_GRACE_S = 86_400;
export const USAGE_WINDOWS = { "1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000 } as const;
export type UsageWindow = keyof typeof USAGE_WINDOWS;

function bad(field: string, message: string): InvalidInputError {
  return new InvalidInputError(message, { extra: { field } });
}

export function validKeyName(name: string): string {
  if (!KEY_NAME_PATTERN.test(name)) {
    throw bad("name", `name must match ${KEY_NAME_PATTERN.source} (a lowercase letter or digit, then up to 62 lowercase letters, digits, '.', '_' or '-'), got '${excerpt(name)}'`);
  }
  if (RESERVED_ACTORS.includes(name)) throw bad("name", `name '${name}' is reserved (${RESERVED_ACTORS.join(", ")})`);
  return name;
}

function validEndpoints(endpoints: readonly string[]): string[] {
  if (endpoints.length > MAX_ENDPOINTS) throw bad("endpoints", `endpoints may list at most ${MAX_ENDPOINTS} endpoints, got ${endpoints.length}`);
  const wrong = endpoints.find((e) => !ENDPOINT_NAME.test(e));
  if (wrong !== undefined) throw bad("endpoints", `endpoints must hold endpoint names (${ENDPOINT_NAME.source}), got '${excerpt(wrong)}'`);
  return [...new Set(endpoints)];
}

function validBudgetMicros(maxBudget: number): number {
  if (!Number.isFinite(maxBudget) || maxBudget <= 0 || maxBudget > MAX_BUDGET) {
    throw bad("max_budget", `max_budget must be dollars > 0 and at most ${MAX_BUDGET}, got ${maxBudget}`);
  }
  const micros = Math.round(maxBudget * 1e6);
  if (micros < 1) throw bad("max_budget", `max_budget must be at least one micro-dollar (0.000001), got ${maxBudget}`);
  return micros;
}

function validDuration(duration: string): BudgetDuration {
  if (!(BUDGET_DURATIONS as readonly string[]).includes(duration)) {
    throw bad("budget_duration", `budget_duration must be one of ${BUDGET_DURATIONS.join(", ")}, got '${excerpt(duration)}'`);
  }
  return duration as BudgetDuration;
}

function validLimit(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw bad(field, `${field} must be a positive integer, or absent for no limit, got ${value}`);
  return value;
}

function validExpiry(expiresAt: Timestamp, now: number): Date {
  const at = timestampDate(expiresAt);
  if (!(at.getTime() > now)) throw bad("expires_at", `expires_at must be in the future, got ${Number.isNaN(at.getTime()) ? "an invalid time" : at.toISOString()}`);
  return at;
}

/** The settings of a create or a PATCH as a request gives them. */
interface SettingsInput {
  endpoints: readonly string[];
  maxBudget?: number;
  budgetDuration?: string;
  rpmLimit?: number;
  tpmLimit?: number;
  maxParallelRequests?: number;
  expiresAt?: Timestamp;
}

/** Validates a create. */
export function newKeySettingsOf(request: SettingsInput & { name: string }, now = Date.now()): KeySettings & { name: string } {
  return {
    name: validKeyName(request.name),
    endpoints: validEndpoints(request.endpoints),
    maxBudgetMicros: request.maxBudget === undefined ? null : validBudgetMicros(request.maxBudget),
    budgetDuration: request.budgetDuration === undefined ? null : validDuration(request.budgetDuration),
    rpmLimit: request.rpmLimit === undefined ? null : validLimit("rpm_limit", request.rpmLimit),
    tpmLimit: request.tpmLimit === undefined ? null : validLimit("tpm_limit", request.tpmLimit),
    maxParallelRequests: request.maxParallelRequests === undefined ? null : validLimit("max_parallel_requests", request.maxParallelRequests),
    expiresAt: request.expiresAt === undefined ? null : validExpiry(request.expiresAt, now),
  };
}

const FIELDS = ["endpoints", "max_budget", "budget_duration", "rpm_limit", "tpm_limit", "max_parallel_requests", "expires_at"] as const;
type Field = (typeof FIELDS)[number];

const JSON_NAMES: Readonly<Record<string, Field>> = {
  maxBudget: "max_budget",
  budgetDuration: "budget_duration",
  rpmLimit: "rpm_limit",
  tpmLimit: "tpm_limit",
  maxParallelRequests: "max_parallel_requests",
  expiresAt: "expires_at",
};

function isSet(req: UpdateKeyRequest, field: Field): boolean {
  switch (field) {
    case "endpoints":
      return req.endpoints.length > 0;
    case "max_budget":
      return req.maxBudget !== undefined;
    case "budget_duration":
      return req.budgetDuration !== undefined;
    case "rpm_limit":
      return req.rpmLimit !== undefined;
    case "tpm_limit":
      return req.tpmLimit !== undefined;
    case "max_parallel_requests":
      return req.maxParallelRequests !== undefined;
    case "expires_at":
      return req.expiresAt !== undefined;
  }
}

/** Validates a PATCH on its own: a field named but not set is cleared (no limit, no expiry, every endpoint). */
export function keyChangeOf(req: UpdateKeyRequest, now = Date.now()): KeyChange {
  const named = namedFields(req.updateMask, FIELDS, JSON_NAMES, (field) => isSet(req, field));
  if (named.size === 0) throw bad("update_mask", `Nothing to change: give any of ${FIELDS.join(", ")}`);
  const change: KeyChange = {};
  if (named.has("endpoints")) change.endpoints = validEndpoints(req.endpoints);
  if (named.has("max_budget")) change.maxBudgetMicros = req.maxBudget === undefined ? null : validBudgetMicros(req.maxBudget);
  if (named.has("budget_duration")) change.budgetDuration = req.budgetDuration === undefined ? null : validDuration(req.budgetDuration);
  if (named.has("rpm_limit")) change.rpmLimit = req.rpmLimit === undefined ? null : validLimit("rpm_limit", req.rpmLimit);
  if (named.has("tpm_limit")) change.tpmLimit = req.tpmLimit === undefined ? null : validLimit("tpm_limit", req.tpmLimit);
  if (named.has("max_parallel_requests")) {
    change.maxParallelRequests = req.maxParallelRequests === undefined ? null : validLimit("max_parallel_requests", req.maxParallelRequests);
  }
  if (named.has("expires_at")) change.expiresAt = req.expiresAt === undefined ? null : validExpiry(req.expiresAt, now);
  return change;
}

export function validGrace(graceS: number | undefined): number {
  if (graceS === undefined) return 0;
  if (!Number.isInteger(graceS) || graceS < 0 || graceS > MAX_GRACE_S) throw bad("grace_s", `grace_s must be an integer from 0 to ${MAX_GRACE_S}, got ${graceS}`);
  return graceS;
}

export function validWindow(window: string | undefined): UsageWindow {
  if (window === undefined || window === "") return "24h";
  if (!(window in USAGE_WINDOWS)) throw bad("window", `window must be one of ${Object.keys(USAGE_WINDOWS).join(", ")}, got '${excerpt(window)}'`);
  return window as UsageWindow;
}

export function validUsageEndpoint(endpoint: string | undefined): string | undefined {
  if (endpoint === undefined || endpoint === "") return undefined;
  if (!ENDPOINT_NAME.test(endpoint)) throw bad("endpoint", `endpoint must be an endpoint name (${ENDPOINT_NAME.source}), got '${excerpt(endpoint)}'`);
  return endpoint;
}
