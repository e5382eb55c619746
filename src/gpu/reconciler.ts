import { completeCreation, failCreation } from "./creation-log.js";
import { elapsedSince, type GpuContext } from "./gpu-context.js";
import { INSTANCE_ID_PREFIX, type InstanceRecord } from "./instance-store.js";
import type { MarketInstance } from "./marketplace/marketplace.js";
import { isTerminal } from "./status.js";

// Nothing rented is ever forgotten. The reconciler matches the marketplace's instances carrying
// our label prefix with the stored records: it adopts the instance of a creation interrupted
// after the marketplace call, destroys labelled instances no live record owns (they would bill
// forever; this includes the machine of a failed creation whose destroy was not confirmed), and
// fails creating records whose marketplace instance never appeared.

export interface ReconcileReport {
  adopted: string[];
  destroyed: string[];
  failed: string[];
}

export interface ReconcilerOptions {
  /** A creating record without a marketplace instance older than this is failed. */
  creationGraceMs: number;
}

export async function reconcile(ctx: GpuContext, options: ReconcilerOptions): Promise<ReconcileReport> {
  const report: ReconcileReport = { adopted: [], destroyed: [], failed: [] };
  const labelled = await ctx.marketplace.listInstances(INSTANCE_ID_PREFIX);
  const records = new Map((await ctx.instances.getMany(labelled.map((m) => m.label))).map((r) => [r.instanceId, r]));
  for (const market of labelled) {
    const record = records.get(market.label);
    if (ctx.inFlight.has(market.label)) continue;
    if (record && record.status === "creating" && record.marketInstanceId === null) {
      if (await adopt(ctx, record, market)) report.adopted.push(record.instanceId);
    } else if (!record || record.marketInstanceId !== market.id || isTerminal(record.status)) {
      await destroyOrphan(ctx, market, record);
      report.destroyed.push(market.label);
    }
  }
  const labels = new Set(labelled.map((m) => m.label));
  const now = Date.now();
  for (const record of await ctx.instances.listLive()) {
    const stale = now - record.updatedAt.getTime() >= options.creationGraceMs;
    if (record.status !== "creating" || record.marketInstanceId !== null || labels.has(record.instanceId)) continue;
    if (ctx.inFlight.has(record.instanceId) || !stale) continue;
    await failCreation(ctx, record, `interrupted creation: the marketplace has no instance labelled ${record.instanceId}`, record.createdAt.getTime());
    report.failed.push(record.instanceId);
  }
  return report;
}

async function adopt(ctx: GpuContext, record: InstanceRecord, market: MarketInstance): Promise<boolean> {
  const result = "creating; completed by the reconciler after an interrupted creation";
  return (await completeCreation(ctx, record, market, result, Date.now())) !== null;
}

async function destroyOrphan(ctx: GpuContext, market: MarketInstance, record: InstanceRecord | undefined): Promise<void> {
  const started = Date.now();
  let error: unknown;
  try {
    await ctx.marketplace.destroyInstance(market.id);
  } catch (err) {
    error = err;
    ctx.logger.warn({ err, label: market.label }, "could not destroy an orphaned marketplace instance; retrying next round");
  }
  await ctx.logs.append({
    instanceId: market.label,
    operation: "reconcile_destroy",
    command: `destroy ${market.id}`,
    result: error
      ? `destroy of an orphaned marketplace instance failed: ${(error as Error).message}`
      : `destroyed a marketplace instance ${record ? `that record status ${record.status} does not own` : "with no record"}`,
    executionTime: elapsedSince(started),
    success: error === undefined,
    metadata: { market_instance_id: market.id, gpu_name: market.gpuName, cost_per_hour: market.dphTotal },
  });
}
