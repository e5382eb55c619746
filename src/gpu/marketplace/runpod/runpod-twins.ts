import type { MarketInstance } from "../port.js";

// One label, one pod. A create whose answer was lost may have rented a pod that RunPod lists only
// later; by then the create may have been sent again (and rented a second), or refused, or given
// up as unknown. Each label whose create lost an answer is watched for a while, and every listing
// is sifted by what the service was last told about it: the pod it got (every other pod of the
// label goes), none (they all go), or not known yet (the first one listed is kept, the rest go).

/** How long a label whose create lost an answer is watched. */
export const TWIN_WATCH_MS = 10 * 60_000;

export interface TwinWatch {
  /** A create of the label lost its answer. */
  lost(label: string): void;
  /** The service was told this pod is the label's (a create answered or adopted). */
  kept(label: string, podId: string): void;
  /** The service was told no pod of the label was rented here (a later refusal). */
  none(label: string): void;
  /** The pods to report and the twins to delete, of one listing. */
  sift(pods: readonly MarketInstance[]): { pods: MarketInstance[]; twins: MarketInstance[] };
}

export function createTwinWatch(now: () => number = () => Date.now()): TwinWatch {
  // undefined: not known yet; null: none; a string: the pod kept.
  const watched = new Map<string, { kept: string | null | undefined; until: number }>();
  const watch = (label: string) => watched.get(label);

  return {
    lost(label) {
      watched.set(label, { kept: watch(label)?.kept, until: now() + TWIN_WATCH_MS });
    },
    kept(label, podId) {
      const entry = watch(label);
      if (entry) entry.kept = podId;
    },
    none(label) {
      const entry = watch(label);
      if (entry) entry.kept = null;
    },
    sift(pods) {
      for (const [label, entry] of watched) if (now() > entry.until) watched.delete(label);
      const twins: MarketInstance[] = [];
      for (const pod of pods) {
        const entry = watch(pod.label);
        if (!entry) continue;
        if (entry.kept === undefined) entry.kept = pod.id;
        if (entry.kept !== pod.id) twins.push(pod);
      }
      return { pods: pods.filter((pod) => !twins.includes(pod)), twins };
    },
  };
}
