import { failCreation } from "../creation/creation-log.js";
import { elapsedSince, type GpuContext } from "../gpu-context.js";
import type { InstanceRecord } from "../store/instance-store.js";
import type { StoredStatus } from "../store/status.js";
import { transition } from "./transition.js";
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
  await destroyFailed(ctx, actor, record, machine, reason, "destroyed after a failed creation");
}

/**
 * A machine that was up and then failed for good (RunPod's ERROR): the record becomes failed, not
 * destroyed, and the machine is given back as after a failed creation.
 */
export async function failMachine(ctx: GpuContext, actor: string, record: InstanceRecord, machine: MarketInstance, reason: string): Promise<void> {
  try {
    await transition(
      ctx,
      (trx) => ctx.instances.markFailed(record.instanceId, true, trx, FAILABLE_WHEN_UP),
      (failed) => ({
        actor,
        instanceId: failed.instanceId,
        operation: "status_change",
        command: `sync ${machine.id}`,
        result: `${record.status} -> failed: ${reason}; the marketplace instance is destroyed`,
        executionTime: 0,
        success: true,
        metadata: { from: record.status, to: "failed", market_status: machine.status, template_name: record.templateName },
      }),
    );
  } catch (err) {
    ctx.logger.error({ err, instance_id: record.instanceId }, "could not mark a failed machine's record failed");
  }
  await destroyFailed(ctx, actor, record, machine, reason, "destroyed after it failed");
}

const FAILABLE_WHEN_UP: readonly StoredStatus[] = ["creating", "loading", "running", "running_llm", "exited"];

/** Destroys a failed record's machine, retried a few times, and logs how it went. */
async function destroyFailed(ctx: GpuContext, actor: string, record: InstanceRecord, machine: MarketInstance, reason: string, done: string): Promise<void> {
  const destroyStarted = Date.now();
  const error = await destroyWithRetries(ctx, machine.id);
  await ctx.logs
    .append({
      actor,
      instanceId: record.instanceId,
      operation: "destroy_instance",
      command: `destroy ${machine.id}`,
      result: error ? `marketplace did not confirm the destroy of a failed record's machine, retried by the reconciler: ${error.message}` : `${done}, confirmed by the marketplace`,
      executionTime: elapsedSince(destroyStarted),
      success: error === undefined,
      metadata: { market_instance_id: machine.id, cost_per_hour: machine.dphTotal, reason },
    })
    .catch((err: unknown) => ctx.logger.error({ err, instance_id: record.instanceId }, "could not log the destroy of a failed record's machine"));
}

/**
 * Twins of a lost create are settled against the database: the record names the machine it
 * keeps (the reconciler adopted one listed late, possibly on another process), and a second
 * machine of its label that this process rented is destroyed, the record left as it is. A destroy
 * not confirmed here is the reconciler's: a labelled machine its record does not name.
 */
export async function releaseTwin(ctx: GpuContext, actor: string, record: InstanceRecord, twin: MarketInstance): Promise<void> {
  const started = Date.now();
  const error = await destroyWithRetries(ctx, twin.id);
  ctx.logger.warn({ instance_id: record.instanceId, kept: record.marketInstanceId, twin: twin.id }, "a lost create rented twice; the machine the record names is kept");
  await ctx.logs
    .append({
      actor,
      instanceId: record.instanceId,
      operation: "destroy_instance",
      command: `destroy ${twin.id}`,
      result: error
        ? `a twin of the record's machine ${record.marketInstanceId} was not confirmed destroyed, retried by the reconciler: ${error.message}`
        : `destroyed a twin of the record's machine ${record.marketInstanceId} (a lost create rented twice), confirmed by the marketplace`,
      executionTime: elapsedSince(started),
      success: error === undefined,
      metadata: { market_instance_id: twin.id, kept_market_instance_id: record.marketInstanceId, cost_per_hour: twin.dphTotal },
    })
    .catch((err: unknown) => ctx.logger.error({ err, instance_id: record.instanceId }, "could not log the destroy of a twin"));
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
