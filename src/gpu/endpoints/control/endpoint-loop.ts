import type { Logger } from "pino";
import { createRepeatingTask } from "../../lifecycle/repeating-task.js";
import type { SyncLeader } from "../../lifecycle/sync-leader.js";
import type { EndpointController } from "./endpoint-controller.js";

// The endpoint controller's timers, every GPU_ENDPOINT_PROBE_MS, independent of the status sync's
// interval: one for the readiness probes, one for the decisions, so that a launch that waits for
// the marketplace (vast.ai may take a minute to rent) never holds a probe back and a failing
// replica still leaves routing at its first failed probe. Both run only on the process that holds
// the sync leadership (the sync loop's lock: one controller across service processes). Probe
// rounds never overlap; decision rounds never overlap for one endpoint.

export interface EndpointLoop {
  start(): void;
  /** Stops scheduling and waits for the rounds under way. */
  stop(): Promise<void>;
  /** Probes, then decides, now, if this process leads; used by tests. */
  runOnce(): Promise<void>;
}

export interface EndpointLoopOptions {
  controller: EndpointController;
  intervalMs: number;
  leader?: SyncLeader;
  logger: Logger;
  /** The endpoints' history sampler (gpu/history/), run on the same lead every interval. */
  history?: { sampleDue(): Promise<void> };
}

export function createEndpointLoop(options: EndpointLoopOptions): EndpointLoop {
  const { controller, leader } = options;
  const leading = async () => !leader || (await leader.hold());
  const every = (what: string, task: () => Promise<unknown>) => createRepeatingTask({ ...options, what }, task);
  const probes = every("endpoint probes", async () => (await leading()) && controller.probeOnce());
  // Each tick starts a round for every endpoint whose last one has ended, without waiting for the
  // rounds to end: one endpoint's slow rental never holds another's next round.
  const decisions = every("endpoint controller round", async () => {
    // Not awaited, so nothing else catches it: a round that cannot even list the endpoints (the
    // database away) is logged here, never left to reject unhandled (which would end the process).
    if (await leading()) void controller.decideOnce().catch((err: unknown) => options.logger.warn({ err }, "endpoint controller round failed; retrying next round"));
  });
  const history = every("endpoint history sample", async () => (await leading()) && options.history?.sampleDue());
  return {
    start() {
      void probes.start();
      void decisions.start();
      void history.start();
    },
    async stop() {
      await Promise.all([probes.stop(), decisions.stop(), history.stop()]);
      await controller.settle();
    },
    async runOnce() {
      await probes.runOnce();
      if (await leading()) await controller.decideOnce();
    },
  };
}
