// The live follower's loop as explicit steps (live-follower.ts performs them): each step does its
// I/O and names the next, so that every way round the loop, and every wait in it, can be read here.
//
//   pass ---- full batch, or changes found while not listening ----> pass
//     |------ nothing found, not listening -----------------------> listen --> pass
//     |------ listening (writers wake it) ------------------------> idle ----> pass
//     |------ failed ---------------------------------------------> backoff -> pass
//     '------ lock not held (another replica follows) ------------> standby -> pass
//
// Every wait (standby, idle, backoff) is a sleep that a wake-up may cut short; a wake-up is
// consumed by the sleep it ends, so one that arrives in a pass whose session then dies cannot make
// every later standby wait return at once.

export type Step =
  /** Holding the lock (or taking it): claim the due entries and apply them. */
  | { kind: "pass"; failures: number }
  /** Caught up and not listening: set the wake-up flag, then look once more. */
  | { kind: "listen" }
  /** Caught up and listening: sleep until a wake-up or the poll. */
  | { kind: "idle" }
  /** The last pass failed: wait, longer with each failure in a row. */
  | { kind: "backoff"; failures: number }
  /** Another replica follows: wait, then try the lock again. */
  | { kind: "standby" };

export const FIRST_STEP: Step = { kind: "pass", failures: 0 };

/**
 * After a pass that claimed `claimed` entries (at most `batchSize`): straight on while there is
 * more to do or no trigger would wake the follower, else listen or sleep. `listening` is the
 * wake-up flag as this follower last set it (undefined: unknown).
 */
export function afterPass(claimed: number, batchSize: number, listening: boolean | undefined): Step {
  if (claimed >= batchSize) return FIRST_STEP;
  // Not listening: changes committed during the pass sent no wake-up.
  if (listening !== true) return claimed > 0 ? FIRST_STEP : { kind: "listen" };
  return { kind: "idle" };
}

/** 0.5 s after the first failure, doubling up to 5 s: a dependency back is noticed within seconds. */
export function backoffMs(failures: number): number {
  return Math.min(5_000, 250 * 2 ** Math.min(failures, 5));
}
