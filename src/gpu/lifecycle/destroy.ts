import { ConflictError, UnavailableError } from "../../errors.js";
import { elapsedSince, type GpuContext } from "../gpu-context.js";
import { gpuInfoJson, machineRefOf, type InstanceRecord } from "../store/instance-store.js";
import type { LimitName } from "../money/limits.js";
import { transition } from "./transition.js";

// Verified destroy: the record becomes destroyed only once the marketplace confirmed it. Until
// then the record carries destroy_requested_at and the sync loop retries.

export type DestroyOperation = "destroy_instance" | "auto_destroy";

/** Why an automatic destroy happened, for its log record: the limit reached. */
export interface DestroyCause {
  reason: string;
  limit: LimitName;
}

/**
 * Destroys the instance of a record and writes one log record. Idempotent: an already destroyed
 * record is returned as it is, with no log record (nothing happened).
 */
export async function destroyRecord(
  ctx: GpuContext,
  actor: string,
  record: InstanceRecord,
  operation: DestroyOperation,
  cause?: DestroyCause,
): Promise<InstanceRecord> {
  if (record.status === "destroyed") return record;
  if (record.marketInstanceId === null && record.status === "creating") {
    throw new ConflictError(`Instance '${record.instanceId}' is still being created; destroy it once creation has answered`);
  }
  const started = Date.now();
  const machine = machineRefOf(record);
  const command = machine !== null ? `destroy ${machine}` : "none (no marketplace instance)";
  const metadata = {
    template_name: record.templateName,
    gpu_info: gpuInfoJson(record.gpuInfo),
    cost_per_hour: record.costPerHour,
    previous_status: record.status,
    ...(record.endpoint ? { endpoint: record.endpoint } : {}),
    ...(cause ? { limit: cause.limit } : {}),
  };
  const why = cause ? `${cause.reason}; ` : "";
  if (machine !== null) {
    await ctx.instances.requestDestroy(record.instanceId);
    try {
      await ctx.marketplace.destroyInstance(machine);
    } catch (err) {
      ctx.logger.warn({ err, instance_id: record.instanceId }, "marketplace did not confirm a destroy");
      await ctx.logs.append({
        actor,
        instanceId: record.instanceId,
        operation,
        command,
        result: `${why}marketplace did not confirm the destroy: ${(err as Error).message}`,
        executionTime: elapsedSince(started),
        success: false,
        metadata,
      });
      throw new UnavailableError(
        `The marketplace did not confirm the destroy of '${record.instanceId}'; it is retried in the background`,
        { cause: err },
      );
    }
  }
  const destroyed = await transition(
    ctx,
    (trx) => ctx.instances.markDestroyed(record.instanceId, trx),
    () => ({
      actor,
      instanceId: record.instanceId,
      operation,
      command,
      result: `${why}destroyed, confirmed by the marketplace`,
      executionTime: elapsedSince(started),
      success: true,
      metadata,
    }),
  );
  // Null: a concurrent destroy got there first and wrote the log record.
  return destroyed ?? (await ctx.instances.get(record.instanceId)) ?? record;
}
