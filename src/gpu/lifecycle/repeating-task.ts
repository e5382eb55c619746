import type { Logger } from "pino";

// A background task run every intervalMs, the next run scheduled only once the previous one has
// finished, so runs never overlap however long one takes. The sync loop and the endpoint
// controller's timers are each one of these.

export interface RepeatingTask {
  /** Schedules runs; with `runFirst`, runs once at once and resolves when that run has ended. */
  start(options?: { runFirst?: boolean }): Promise<void>;
  /** Stops scheduling and waits for the run under way. */
  stop(): Promise<void>;
  /** One run now, or the one under way; used by start() and by tests. */
  runOnce(): Promise<void>;
}

export interface RepeatingTaskOptions {
  intervalMs: number;
  logger: Logger;
  /** What a failed run is logged as: "<what> failed". */
  what: string;
}

export function createRepeatingTask(options: RepeatingTaskOptions, task: () => Promise<unknown>): RepeatingTask {
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> | undefined;
  let stopped = true;

  function runOnce(): Promise<void> {
    current ??= task()
      .then(() => undefined)
      .catch((err: unknown) => options.logger.error({ err }, `${options.what} failed`))
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
    async start({ runFirst = false } = {}) {
      stopped = false;
      if (runFirst) await runOnce();
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
