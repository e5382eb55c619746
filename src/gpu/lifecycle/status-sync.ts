import { UnavailableError } from "../../errors.js";
import { ACTOR_SYSTEM } from "../../actor.js";
import { destroyRecord } from "./destroy.js";
import { failMachine, releaseMachine } from "./machine-release.js";
import { DEFAULT_CREATION_GRACE_MS, marketFactsOf, type GpuContext } from "../gpu-context.js";
import { machineRefOf, type InstanceRecord } from "../store/instance-store.js";
import { hasItsMarket } from "./market-listing.js";
import type { MarketInstance } from "../marketplace/port.js";
import { modelServerUrl } from "./probe.js";
import { ungated, type StillLeads } from "./sync-leader.js";
import { isTerminal, storedStatusOf, type StoredStatus } from "../store/status.js";
import { transition } from "./transition.js";

// Keeps the stored status equal to the marketplace's (the marketplace is the truth). Called by
// the background loop and by every status read. Each change bumps updated_at and writes one
// status_change log record; the compare-and-set in the store makes concurrent syncs of the same
// instance write it once.

export interface SyncOutcome {
  record: InstanceRecord;
  /** The marketplace's view, undefined when it has no instance (not created yet, or gone). */
  market: MarketInstance | undefined;
  /** Whether the model server answered its probe just now. */
  llmAnswered: boolean;
}

/**
 * Syncs one record. `observed` is the instance as a listing of this round saw it; without it (or
 * when the listing did not have it, e.g. rented after the listing) the marketplace is asked. A
 * sync round passes `stillLeads`, asked before each destroy (a pending one retried, an exited
 * auto_destroy instance, a machine given back): no, and the record is left for the next leader.
 */
export async function syncRecord(ctx: GpuContext, record: InstanceRecord, observed?: MarketInstance, stillLeads: StillLeads = ungated): Promise<SyncOutcome> {
  const idle = { record, market: undefined, llmAnswered: false };
  // No other market may speak for a machine whose market is not configured now.
  if (!hasItsMarket(ctx, record)) return idle;
  if (record.destroyRequestedAt !== null && record.status !== "destroyed") {
    if (!(await stillLeads())) return idle;
    return { ...idle, record: await destroyRecord(ctx, ACTOR_SYSTEM, record, "destroy_instance") };
  }
  const machine = machineRefOf(record);
  if (isTerminal(record.status) || machine === null) return idle;
  let market: MarketInstance | undefined = observed;
  try {
    market ??= await ctx.marketplace.getInstance(machine);
  } catch (err) {
    throw new UnavailableError("The marketplace did not report the instance status", { cause: err });
  }
  if (!market) {
    // A machine just rented may not be shown yet: never conclude it is gone before the grace ends.
    const waited = Date.now() - record.updatedAt.getTime();
    if (record.status === "creating" && waited < (ctx.creationGraceMs ?? DEFAULT_CREATION_GRACE_MS)) return idle;
    return { ...idle, record: await markVanished(ctx, record) };
  }
  // A state the adapter does not know says nothing of the machine: the record stays as stored.
  if (market.unknownState !== undefined) return idle;
  if (market.failure !== undefined) {
    return (await stillLeads()) ? { ...idle, market, record: await failStart(ctx, record, market) } : { ...idle, market };
  }
  const url = modelServerUrl(market);
  const llmAnswered = market.status === "running" && record.templateName !== null && url !== undefined && (await ctx.probe(url, record.modelApiKey));
  let current = await applyStatus(ctx, record, storedStatusOf(market.status, llmAnswered, record.status), market);
  if (current.status === "exited" && current.autoDestroy && (await stillLeads())) {
    current = await destroyRecord(ctx, ACTOR_SYSTEM, current, "auto_destroy");
  }
  return { record: current, market, llmAnswered };
}

/**
 * Whether the record's preempted_at changes: set when the marketplace reports a preemption,
 * cleared when the machine comes back (creating, loading, running); undefined: unchanged.
 */
function preemptionChange(record: InstanceRecord, market: MarketInstance): boolean | undefined {
  const preempted = market.status === "preempted" ? true : market.status === "exited" || market.status === "offline" ? undefined : false;
  return preempted === undefined || preempted === (record.preemptedAt !== null) ? undefined : preempted;
}

async function applyStatus(ctx: GpuContext, record: InstanceRecord, next: StoredStatus, market: MarketInstance): Promise<InstanceRecord> {
  const preempted = preemptionChange(record, market);
  if (next === record.status && preempted === undefined) return record;
  const { publicIp, sshPort, portMappings } = marketFactsOf(market);
  const why = preempted ? " (preempted by the marketplace)" : "";
  const changed = await transition(
    ctx,
    (trx) => ctx.instances.changeStatus(record.instanceId, record.status, next, { publicIp, sshPort, portMappings }, trx, preempted),
    () => ({
      actor: ACTOR_SYSTEM,
      instanceId: record.instanceId,
      operation: "status_change",
      command: `sync ${market.id}`,
      result: `${record.status} -> ${next}${why}`,
      executionTime: 0,
      success: true,
      metadata: { from: record.status, to: next, market_status: market.status, template_name: record.templateName, ...(preempted && { preempted: true }) },
    }),
  );
  return changed ?? (await ctx.instances.get(record.instanceId)) ?? record;
}

/**
 * The machine exists but its container could not start, or failed for good once up: the record
 * fails (never reads destroyed) and the machine is given back.
 */
async function failStart(ctx: GpuContext, record: InstanceRecord, market: MarketInstance): Promise<InstanceRecord> {
  if (record.status === "creating" || record.status === "loading") {
    await releaseMachine(ctx, ACTOR_SYSTEM, record, market, `the marketplace instance could not start: ${market.failure}`, Date.now());
  } else {
    await failMachine(ctx, ACTOR_SYSTEM, record, market, `the marketplace instance failed: ${market.failure}`);
  }
  return (await ctx.instances.get(record.instanceId)) ?? record;
}

/** The marketplace no longer knows the instance: it is not running and not billed any more. */
async function markVanished(ctx: GpuContext, record: InstanceRecord): Promise<InstanceRecord> {
  const changed = await transition(
    ctx,
    (trx) => ctx.instances.markDestroyed(record.instanceId, trx),
    () => ({
      actor: ACTOR_SYSTEM,
      instanceId: record.instanceId,
      operation: "status_change",
      command: `sync ${machineRefOf(record)}`,
      result: `${record.status} -> destroyed: the marketplace no longer has the instance`,
      executionTime: 0,
      success: true,
      metadata: { from: record.status, to: "destroyed", market_status: null, template_name: record.templateName },
    }),
  );
  return changed ?? (await ctx.instances.get(record.instanceId)) ?? record;
}
