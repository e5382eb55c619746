import type { NewLogEntry } from "../store/execution-log-store.js";
import { elapsedSince, marketFactsOf, type GpuContext } from "../gpu-context.js";
import { gpuInfoJson, type InstanceRecord } from "../store/instance-store.js";
import type { MarketInstance } from "../marketplace/port.js";
import { transition } from "../lifecycle/transition.js";

// The outcomes of a creation as records: completed (one create_instance log record) or failed
// (status failed and one create_instance log record with success=false).

function creationCommand(record: InstanceRecord): string {
  return `create ${record.offerId} label=${record.instanceId} image=${record.imageName}`;
}

export function creationLog(actor: string, record: InstanceRecord, market: MarketInstance, result: string, executionTime: number): NewLogEntry {
  return {
    actor,
    instanceId: record.instanceId,
    operation: "create_instance",
    command: creationCommand(record),
    result,
    executionTime,
    success: true,
    metadata: {
      template_name: record.templateName,
      gpu_info: gpuInfoJson(record.gpuInfo),
      cost_per_hour: record.costPerHour,
      offer_id: record.offerId,
      market_instance_id: market.id,
      auto_destroy: record.autoDestroy,
      ...(record.endpoint ? { endpoint: record.endpoint } : {}),
    },
  };
}

/** Completes a creating record with what the marketplace rented; null when it was settled meanwhile. */
export function completeCreation(ctx: GpuContext, actor: string, record: InstanceRecord, market: MarketInstance, result: string, started: number) {
  return transition(
    ctx,
    (trx) => ctx.instances.completeCreation(record.instanceId, marketFactsOf(market), trx),
    (updated) => creationLog(actor, updated, market, result, elapsedSince(started)),
  );
}

/**
 * Marks a creating record failed with its one success=false creation log record. `machine` is
 * the marketplace instance rented for it, if any: the record's cost runs until now then, and is
 * zero otherwise.
 */
export async function failCreation(
  ctx: GpuContext,
  actor: string,
  record: InstanceRecord,
  reason: string,
  started: number,
  machine?: MarketInstance,
): Promise<void> {
  await transition(
    ctx,
    (trx) => ctx.instances.markFailed(record.instanceId, machine !== undefined, trx),
    (failed) => ({
      actor,
      instanceId: failed.instanceId,
      operation: "create_instance",
      command: creationCommand(failed),
      result: reason,
      executionTime: elapsedSince(started),
      success: false,
      metadata: {
        template_name: failed.templateName,
        gpu_info: gpuInfoJson(failed.gpuInfo),
        cost_per_hour: failed.costPerHour,
        offer_id: failed.offerId,
        market_instance_id: machine?.id ?? null,
        ...(failed.endpoint ? { endpoint: failed.endpoint } : {}),
      },
    }),
  );
}
