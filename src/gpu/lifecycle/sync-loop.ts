import type { GpuContext } from "../gpu-context.js";
import { ACTOR_SYSTEM } from "../../actor.js";
import { destroyRecord } from "./destroy.js";
import { machineRefOf, type InstanceRecord } from "../store/instance-store.js";
import { reachedLimit } from "../money/limits.js";
import { isTerminal } from "../store/status.js";
import { reconcile, type ReconcilerOptions } from "./reconciler.js";
import { createRepeatingTask } from "./repeating-task.js";
import { directoryOf } from "../marketplace/markets/market-directory.js";
import { hasItsMarket, listEachMarket, marketOfRecord, type MachinesOfRound } from "./market-listing.js";
import { syncRecord } from "./status-sync.js";
import type { StillLeads, SyncLeader } from "./sync-leader.js";

// The background loop: each round lists each market's instances once, reconciles labels with
// them, then syncs every live record of the markets that answered from the same list (and retries pending destroys) and
// destroys those that reached their time or cost limit. A round costs one marketplace list call,
// not one call per instance. Rounds never overlap: the next is scheduled when the previous one
// has finished. With several processes on one database only the sync leader runs them, and each
// destroy of a round first confirms that this process still leads: a round whose lead lapsed
// (its lock's session dropped, another process may lead now) does nothing more.

export interface SyncLoopOptions extends ReconcilerOptions {
  intervalMs: number;
  /** Which of several processes on one database runs the rounds; absent: this one always does. */
  leader?: SyncLeader;
  /** Records synced at the same time. */
  concurrency?: number;
}

export interface SyncLoop {
  /** Runs a first round (the start-up reconciliation), then one every intervalMs. */
  start(): Promise<void>;
  /** Stops scheduling and waits for the round under way. */
  stop(): Promise<void>;
  /** One round now; used by start() and by tests. */
  runOnce(): Promise<void>;
}

export function createSyncLoop(ctx: GpuContext, options: SyncLoopOptions): SyncLoop {
  const concurrency = options.concurrency ?? 4;
  const namedOnce = new Set<string>();

  /** Records whose market is configured; each of the others is named in the log once. */
  function withTheirMarket(records: InstanceRecord[]): InstanceRecord[] {
    return records.filter((record) => {
      if (hasItsMarket(ctx, record)) return true;
      if (!namedOnce.has(record.instanceId)) {
        namedOnce.add(record.instanceId);
        ctx.logger.warn(
          { instance_id: record.instanceId, market: record.market ?? "", status: record.status },
          record.market === null
            ? "a record from before several markets names no market; it keeps its status until a market lists its machine"
            : "a record's market is not configured; it keeps its status, and nothing is sent to another market for it",
        );
      }
      return false;
    });
  }

  /** The account's machines, each market listed once per round for the reconciler and every record's sync. */
  async function listMachines(): Promise<MachinesOfRound> {
    try {
      return await listEachMarket(ctx);
    } catch (err) {
      ctx.logger.warn({ err }, "the marketplace did not list its instances; retrying next round");
      return { machines: undefined, unreachable: new Set(directoryOf(ctx.marketplace).names) };
    }
  }

  /** The round's check before each action: once it answered no, it answers no without asking again. */
  function leadOfRound(): StillLeads & { lapsed(): boolean } {
    let lapsed = false;
    const stillLeads = async () => {
      if (lapsed || !options.leader) return !lapsed;
      if (!(await options.leader.confirm()) && !lapsed) {
        lapsed = true;
        ctx.logger.warn("sync leadership lapsed mid-round; this round does nothing more");
      }
      return !lapsed;
    };
    return Object.assign(stillLeads, { lapsed: () => lapsed });
  }

  async function round(): Promise<void> {
    if (options.leader && !(await options.leader.hold())) return;
    const stillLeads = leadOfRound();
    const { machines, unreachable } = await listMachines();
    if (machines) {
      try {
        await reconcile(ctx, options, machines, stillLeads, unreachable);
      } catch (err) {
        ctx.logger.warn({ err }, "reconciliation failed; retrying next round");
      }
    }
    const byId = new Map((machines ?? []).map((m) => [m.id, m]));
    // A market that did not answer leaves its records as they are stored: asking it once per record would only fail slower.
    const records = stillLeads.lapsed() ? [] : withTheirMarket(await ctx.instances.listLive()).filter((r) => !unreachable.has(marketOfRecord(ctx, r)!));
    const queue = [...records];
    const worker = async () => {
      for (let record = queue.shift(); record && !stillLeads.lapsed(); record = queue.shift()) {
        await syncRecord(ctx, record, byId.get(machineRefOf(record) ?? ""), stillLeads)
          .then(({ record: synced }) => enforceLimits(ctx, synced, stillLeads))
          .catch((err: unknown) => ctx.logger.warn({ err, instance_id: record.instanceId }, "status sync failed; retrying next round"));
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, records.length) }, worker));
  }

  const task = createRepeatingTask({ intervalMs: options.intervalMs, logger: ctx.logger, what: "status sync round" }, round);
  return {
    start: () => task.start({ runFirst: true }),
    async stop() {
      await task.stop();
      await options.leader?.release();
    },
    runOnce: task.runOnce,
  };
}

/**
 * Destroys an instance that reached one of its limits, with one auto_destroy log record naming
 * it. A record still waiting for its marketplace instance is left for the next round.
 */
async function enforceLimits(ctx: GpuContext, record: InstanceRecord, stillLeads: StillLeads): Promise<InstanceRecord> {
  if (isTerminal(record.status) || record.marketInstanceId === null) return record;
  const reached = reachedLimit(record, new Date());
  if (!reached || !(await stillLeads())) return record;
  return destroyRecord(ctx, ACTOR_SYSTEM, record, "auto_destroy", reached);
}
