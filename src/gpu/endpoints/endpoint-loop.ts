import type { Logger } from "pino";
import type { SyncLeader } from "../lifecycle/sync-leader.js";
import type { EndpointController } from "./endpoint-controller.js";

// The endpoint controller's own timer, every GPU_ENDPOINT_PROBE_MS, independent of the status
// sync's interval. It runs only on the process that holds the sync leadership (the same lock as
// the sync loop: one controller across service processes). Rounds never overlap.

export interface EndpointLoop {
  start(): void;
  /** Stops scheduling and waits for the round under way. */
  stop(): Promise<void>;
  /** One round now, if this process leads; used by tests. */
  runOnce(): Promise<void>;
}

export function createEndpointLoop(options: {
  controller: EndpointController;
  intervalMs: number;
  leader?: SyncLeader;
  logger: Logger;
}): EndpointLoop {
  const { controller, intervalMs, leader, logger } = options;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> | undefined;
  let stopped = true;

  function runOnce(): Promise<void> {
    current ??= (async () => {
      if (leader && !(await leader.hold())) return;
      await controller.runOnce();
    })()
      .catch((err: unknown) => logger.error({ err }, "endpoint controller round failed"))
      .finally(() => {
        current = undefined;
      });
    return current;
  }

  function schedule(): void {
    if (stopped) return;
    timer = setTimeout(() => {
      void runOnce().finally(schedule);
    }, intervalMs);
    timer.unref();
  }

  return {
    start() {
      stopped = false;
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
