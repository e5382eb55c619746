import { failCreation } from "../creation/creation-log.js";
import { elapsedSince, type GpuContext } from "../gpu-context.js";
import type { InstanceRecord } from "../store/instance-store.js";
import type { MarketInstance } from "../marketplace/port.js";

// An error answer never leaves a billed machine behind. When the marketplace rented a machine
// but the creation cannot be completed, the record is failed first (so that, should this process
// die now, the reconciler finds a labelled machine whose record is failed and destroys it), then
// the machine is destroyed here, retried a few times; a destroy still unconfirmed is retried by
// the reconciler every round until the marketplace confirms it.

/** Waits between destroy attempts made while the client waits for its answer. */
const DESTROY_RETRY_DELAYS_MS = [200, 800];

export async function releaseMachine(
  ctx: GpuContext,
  actor: string,
  record: InstanceRecord,
  machine: MarketInstance,
  reason: string,
  started: number,
): Promise<void> {
  try {
    await failCreation(ctx, actor, record, `${reason}; the rented marketplace instance ${machine.id} is destroyed`, started, machine);
  } catch (err) {
    ctx.logger.error({ err, instance_id: record.instanceId }, "could not mark a failed creation failed");
  }
  const destroyStarted = Date.now();
  const error = await destroyWithRetries(ctx, machine.id);
  await ctx.logs
    .append({
      actor,
      instanceId: record.instanceId,
      operation: "destroy_instance",
      command: `destroy ${machine.id}`,
      result: error
        ? `marketplace did not confirm the destroy after a failed creation, retried by the reconciler: ${error.message}`
        : "destroyed after a failed creation, confirmed by the marketplace",
      executionTime: elapsedSince(destroyStarted),
      success: error === undefined,
      metadata: { market_instance_id: machine.id, cost_per_hour: machine.dphTotal, reason },
    })
    .catch((err: unknown) => ctx.logger.error({ err, instance_id: record.instanceId }, "could not log the destroy of a failed creation"));
}

/** Undefined once the marketplace confirmed; the last error when every attempt failed. */
async function destroyWithRetries(ctx: GpuContext, marketInstanceId: string): Promise<Error | undefined> {
  let last: Error | undefined;
  for (const delay of [0, ...DESTROY_RETRY_DELAYS_MS]) {
    if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
    try {
      await ctx.marketplace.destroyInstance(marketInstanceId);
      return undefined;
    } catch (err) {
      last = err instanceof Error ? err : new Error(String(err));
      ctx.logger.warn({ err, market_instance_id: marketInstanceId }, "marketplace did not confirm the destroy of a failed creation's instance");
    }
  }
  return last;
}
