import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { KeySchema, KeyUsagePointSchema } from "../../../gen/gpu/v1/gpu_service_pb.js";
import type { KeyRecord } from "../../server/keys/key-store.js";
import type { UsagePoint, UsageTotals } from "../../server/keys/key-usage-store.js";
import type { KeyPeriodBounds } from "./key-period.js";

// Keys and their usage as response messages: micro-dollars become dollars here, at the edge.
// Absent settings and times stay unset (omitted in REST JSON).

const NO_USAGE: UsageTotals = { requests: 0, promptTokens: 0, completionTokens: 0, spendMicros: 0, machineCostMicros: 0 };

export function dollarsOf(micros: number): number {
  return micros / 1e6;
}

export interface KeyFacts {
  record: KeyRecord;
  period: KeyPeriodBounds;
  /** The period's usage; undefined: none yet. */
  used: UsageTotals | undefined;
  inFlight: number;
  /** The secret, in the create and rotate answers only. */
  secret?: string;
}

export function keyMessage({ record, period, used = NO_USAGE, inFlight, secret }: KeyFacts): MessageInitShape<typeof KeySchema> {
  const time = (at: Date | null) => (at ? timestampFromDate(at) : undefined);
  return {
    name: record.name,
    key: secret,
    keyPrefix: record.keyPrefix,
    endpoints: [...record.endpoints],
    maxBudget: record.maxBudgetMicros === null ? undefined : dollarsOf(record.maxBudgetMicros),
    budgetDuration: record.budgetDuration ?? undefined,
    rpmLimit: record.rpmLimit ?? undefined,
    tpmLimit: record.tpmLimit ?? undefined,
    maxParallelRequests: record.maxParallelRequests ?? undefined,
    expiresAt: time(record.expiresAt),
    createdAt: time(record.createdAt),
    lastUsedAt: time(record.lastUsedAt),
    revokedAt: time(record.revokedAt),
    period: {
      startsAt: time(period.startsAt),
      resetsAt: time(period.resetsAt),
      spend: dollarsOf(used.spendMicros),
      requests: BigInt(used.requests),
      promptTokens: BigInt(used.promptTokens),
      completionTokens: BigInt(used.completionTokens),
    },
    inFlight,
  };
}

export function usagePointMessage(point: UsagePoint): MessageInitShape<typeof KeyUsagePointSchema> {
  return {
    at: timestampFromDate(point.at),
    requests: BigInt(point.requests),
    promptTokens: BigInt(point.promptTokens),
    completionTokens: BigInt(point.completionTokens),
    spend: dollarsOf(point.spendMicros),
    machineCost: dollarsOf(point.machineCostMicros),
    refused: Object.fromEntries(Object.entries(point.refused).map(([reason, n]) => [reason, BigInt(n)])),
  };
}
