// A simulated model server's prefill lane: the GPU reads one prompt at a time. Prefill is bound by
// compute, and vLLM's scheduler gives each step a budget of tokens served first come, first served,
// so prompts arriving together do not each prefill at full speed: each waits for those before it.
// That queueing is what a replica busy reading prompts its prefix cache lacks costs every request
// that arrives behind them. The lane keeps only the moment it will be free: a prefill queued now
// starts then (or now, if the lane is idle) and ends its own length later. Decoding is batched and
// not in the lane. A prefill once queued keeps its place even if its client leaves.

export interface PrefillLane {
  /** Queues a prefill of `ms` behind those queued before it; the time from now until it ends, ms. */
  enqueue(ms: number): number;
}

/** An idle lane; `now` is the clock in ms (monotonic by default). */
export function createPrefillLane(now: () => number = () => performance.now()): PrefillLane {
  let freeAt = Number.NEGATIVE_INFINITY;
  return {
    enqueue(ms) {
      const at = now();
      freeAt = Math.max(freeAt, at) + ms;
      return freeAt - at;
    },
  };
}
