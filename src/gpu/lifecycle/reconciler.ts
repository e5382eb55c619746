import { completeCreation, failCreation } from "../creation/creation-log.js";
import { ACTOR_SYSTEM } from "../../actor.js";
import { elapsedSince, type GpuContext } from "../gpu-context.js";
import { machineRefOf, type InstanceRecord } from "../store/instance-store.js";
import type { MarketInstance } from "../marketplace/port.js";
import { isTerminal } from "../store/status.js";
import { roundMoney } from "../money/cost.js";
import { releaseMachine } from "./machine-release.js";
import { ungated, type StillLeads } from "./sync-leader.js";
import { hasItsMarket, marketOfRecord } from "./market-listing.js";
import { ownInstanceId } from "../marketplace/markets/market-ids.js";

// Nothing rented is ever forgotten. The reconciler matches the marketplace's instances carrying
// this deployment's labels (deployment.ts) with the stored records: it adopts the instance of a creation interrupted
// after the marketplace call, destroys labelled instances no live record owns (they would bill
// forever; this includes the machine of a failed creation whose destroy was not confirmed), and
// fails creating records whose marketplace instance never appeared. A listed machine is its
// record's when both name the same market and the same id of that market.

export interface ReconcileReport {
  adopted: string[];
  destroyed: string[];
  failed: string[];
}

export interface ReconcilerOptions {
  /** A creating record without a marketplace instance older than this is failed. */
  creationGraceMs: number;
}

/**
 * One reconciliation over the account's machines (listed by the caller, so that a sync round
 * lists them once; listed here when not given), market by market: a creating record of an
 * `unreachable` market is not failed for want of its machine. Only this deployment's machines are looked at:
 * those carrying its label, and those carrying the label of one of its records (records from
 * before labels named the deployment). Anybody else's machine is never touched. Each action
 * (adopt, destroy, fail) first asks `stillLeads`; a no ends the reconciliation there.
 */
export async function reconcile(
  ctx: GpuContext,
  options: ReconcilerOptions,
  machines?: readonly MarketInstance[],
  stillLeads: StillLeads = ungated,
  unreachable: ReadonlySet<string> = new Set(),
): Promise<ReconcileReport> {
  const report: ReconcileReport = { adopted: [], destroyed: [], failed: [] };
  const deployment = await ctx.deployment();
  const all = machines ?? (await ctx.marketplace.listInstances(""));
  const records = new Map((await ctx.instances.getByLabels(all.map((m) => m.label))).map((r) => [r.marketLabel, r]));
  const ours = all.filter((m) => records.has(m.label) || deployment.instanceIdOf(m.label) !== undefined);
  for (const market of ours) {
    const record = await withMarketClaimed(ctx, records.get(market.label), market);
    const instanceId = record?.instanceId ?? deployment.instanceIdOf(market.label)!;
    if (ctx.inFlight.has(instanceId)) continue;
    const adopting = record && record.status === "creating" && record.marketInstanceId === null;
    const orphaned = !record || machineRefOf(record) !== market.id || isTerminal(record.status);
    if ((adopting || orphaned) && !(await stillLeads())) return report;
    if (adopting) {
      if (await adopt(ctx, record, market)) report.adopted.push(record.instanceId);
    } else if (orphaned) {
      await destroyOrphan(ctx, instanceId, market, record);
      report.destroyed.push(instanceId);
    }
  }
  const labels = new Set(ours.map((m) => m.label));
  const now = Date.now();
  for (const record of await ctx.instances.listLive()) {
    const stale = now - record.updatedAt.getTime() >= options.creationGraceMs;
    if (record.status !== "creating" || record.marketInstanceId !== null || labels.has(record.marketLabel)) continue;
    // A market that did not answer, or is not configured now, may well have the machine: its absence says nothing.
    if (!hasItsMarket(ctx, record) || unreachable.has(marketOfRecord(ctx, record)!)) continue;
    if (ctx.inFlight.has(record.instanceId) || !stale) continue;
    if (!(await stillLeads())) return report;
    await failCreation(ctx, ACTOR_SYSTEM, record, `interrupted creation: the marketplace has no instance labelled ${record.marketLabel}`, record.createdAt.getTime());
    report.failed.push(record.instanceId);
  }
  return report;
}

/**
 * A record from before several markets names no market: the market that lists its labelled
 * machine under the record's id is its market, stored from now on.
 */
async function withMarketClaimed(ctx: GpuContext, record: InstanceRecord | undefined, machine: MarketInstance): Promise<InstanceRecord | undefined> {
  if (!record || record.market !== null || machine.market === undefined || record.marketInstanceId !== ownInstanceId(machine)) return record;
  ctx.logger.info({ instance_id: record.instanceId, market: machine.market }, "a record from before several markets is named its market, which lists its machine");
  return (await ctx.instances.claimMarket(record.instanceId, machine.market)) ?? (await ctx.instances.get(record.instanceId)) ?? record;
}

async function adopt(ctx: GpuContext, record: InstanceRecord, market: MarketInstance): Promise<boolean> {
  // The cap holds for an adopted machine as for one whose creation completed: the price rented.
  if (record.priceCap !== null && roundMoney(market.dphTotal) > record.priceCap) {
    const reason = `the adopted machine rents at $${market.dphTotal}/h, above the creation's cap of $${record.priceCap}/h`;
    await releaseMachine(ctx, ACTOR_SYSTEM, record, market, reason, Date.now());
    return false;
  }
  const result = "creating; completed by the reconciler after an interrupted creation";
  return (await completeCreation(ctx, ACTOR_SYSTEM, record, market, result, Date.now())) !== null;
}

async function destroyOrphan(ctx: GpuContext, instanceId: string, market: MarketInstance, record: InstanceRecord | undefined): Promise<void> {
  const started = Date.now();
  let error: unknown;
  try {
    await ctx.marketplace.destroyInstance(market.id);
  } catch (err) {
    error = err;
    ctx.logger.warn({ err, label: market.label }, "could not destroy an orphaned marketplace instance; retrying next round");
  }
  await ctx.logs.append({
    actor: ACTOR_SYSTEM,
    instanceId,
    operation: "reconcile_destroy",
    command: `destroy ${market.id}`,
    result: error
      ? `destroy of an orphaned marketplace instance failed: ${(error as Error).message}`
      : `destroyed a marketplace instance ${record ? `that record status ${record.status} does not own` : "with no record"}`,
    executionTime: elapsedSince(started),
    success: error === undefined,
    metadata: { market_instance_id: market.id, label: market.label, gpu_name: market.gpuName, cost_per_hour: market.dphTotal },
  });
}
