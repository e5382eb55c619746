import type { GpuContext } from "./gpu-context.js";
import { reconcile, type ReconcilerOptions } from "./reconciler.js";
import { syncRecord } from "./status-sync.js";

// The background loop: each round reconciles labels with the marketplace, then syncs every live
// record (and retries pending destroys). Rounds never overlap: the next is scheduled when the
// previous one has finished.

export interface SyncLoopOptions extends ReconcilerOptions {
  intervalMs: number;
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
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> | undefined;
  let stopped = true;

  async function round(): Promise<void> {
    try {
      await reconcile(ctx, options);
    } catch (err) {
      ctx.logger.warn({ err }, "reconciliation failed; retrying next round");
    }
    const records = await ctx.instances.listLive();
    const queue = [...records];
    const worker = async () => {
      for (let record = queue.shift(); record; record = queue.shift()) {
        await syncRecord(ctx, record).catch((err: unknown) =>
          ctx.logger.warn({ err, instance_id: record.instanceId }, "status sync failed; retrying next round"),
        );
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, records.length) }, worker));
  }

  function runOnce(): Promise<void> {
    current ??= round()
      .catch((err: unknown) => ctx.logger.error({ err }, "status sync round failed"))
      .finally(() => {
        current = undefined;
      });
    return current;
  }

  function schedule(): void {
    if (stopped) return;
    timer = setTimeout(() => {
      void runOnce().finally(schedule);
    }, options.intervalMs);
    timer.unref();
  }

  return {
    async start() {
      stopped = false;
      await runOnce();
      schedule();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await current;
    },
    runOnce,
  };
}
