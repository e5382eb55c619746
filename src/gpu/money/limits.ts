import type { MessageInitShape } from "@bufbuild/protobuf";
import type { InstanceLimitsSchema, Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { accruedCost, round, roundMoney, uptimeMs } from "./cost.js";
import type { CustomConfig } from "../creation/custom-config.js";
import type { InstanceRecord } from "../store/instance-store.js";

// Per-instance limits: max_hours (uptime) and max_cost (total cost, dollars), from custom_config
// or the template's defaults. The sync loop destroys an instance that reached one (sync-loop.ts,
// enforceLimits).

const MS_PER_HOUR = 3_600_000;

export interface InstanceLimits {
  maxHours: number | null;
  maxCost: number | null;
}

export type LimitName = "max_hours" | "max_cost";

/** custom_config wins over the template's default; neither: no limit. */
export function limitsFor(template: Template | undefined, custom: CustomConfig): InstanceLimits {
  return {
    maxHours: custom.maxHours ?? template?.config?.maxHours ?? null,
    maxCost: custom.maxCost ?? template?.config?.maxCost ?? null,
  };
}

/** The limit the record has reached at `now`, with a sentence saying so; undefined when none. */
export function reachedLimit(record: InstanceRecord, now: Date): { limit: LimitName; reason: string } | undefined {
  const uptime = uptimeMs(record.createdAt, record.destroyedAt, now);
  if (record.maxHours !== null && uptime >= record.maxHours * MS_PER_HOUR) {
    return { limit: "max_hours", reason: `max_hours reached: up ${round(uptime / MS_PER_HOUR, 4)} h of ${record.maxHours} h` };
  }
  // Compared unrounded: a limit finer than the reported cents is reached when it is really reached.
  const cost = accruedCost(record.costPerHour, uptime);
  if (record.maxCost !== null && cost >= record.maxCost) {
    return { limit: "max_cost", reason: `max_cost reached: cost $${roundMoney(cost)} of $${record.maxCost}` };
  }
  return undefined;
}

/** The limits and what is left of them, as enhanced status and cost analysis show them. */
export function limitsView(record: InstanceRecord, now: Date): MessageInitShape<typeof InstanceLimitsSchema> {
  const uptime = uptimeMs(record.createdAt, record.destroyedAt, now);
  const view: MessageInitShape<typeof InstanceLimitsSchema> = {};
  if (record.maxHours !== null) {
    view.maxHours = record.maxHours;
    // Rounded, but never above the limit itself (a limit finer than the rounding stays exact).
    view.hoursLeft = Math.min(record.maxHours, round(Math.max(0, record.maxHours - uptime / MS_PER_HOUR), 4));
  }
  if (record.maxCost !== null) {
    view.maxCost = record.maxCost;
    view.costLeft = Math.min(record.maxCost, roundMoney(Math.max(0, record.maxCost - accruedCost(record.costPerHour, uptime))));
  }
  return view;
}
