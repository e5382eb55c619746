import type { CapacitySettings } from "../resource/endpoint-store.js";
import { replicaState, type ReplicaFacts } from "../replicas/replica-state.js";

// How an endpoint's replicas are rented (SPEC.md section 2, "Interruptible replicas with on-demand
// fallback"), as pure rules the plan asks: which kind each launch is, which on-demand fallbacks may
// go, and when to try to leave them. A replica's slot is written on its row when it is launched
// (interruptible or on-demand); one launched for an interruptible slot whose record rents
// on-demand (no bid fitted) is a fallback: its row says so once the launch answered, and its
// record says so even if the process died before.
// - the first `on_demand_base` replicas are on-demand slots, the rest interruptible (all
//   on-demand without `interruptible`);
// - a fallback leaves only once an interruptible replica that takes its place is ready: one
//   interruptible launch at a time beside the fallbacks (a surge within replicas + 1), a bid or
//   nothing, backed off like any launch; then the fallbacks drain while ready replicas stay at
//   least the target.

export interface LaunchKind {
  /** The slot: an interruptible bid, or on-demand. */
  interruptible: boolean;
  /** For an interruptible slot: rent on-demand when no bid fits (a fallback). */
  fallback: boolean;
}

export function isFallback({ row, record }: ReplicaFacts): boolean {
  return row.fallback || (row.interruptible && record !== null && !record.interruptible);
}

/** Whether the replica holds an interruptible slot (a bid, or a fallback standing in for one). */
function inInterruptibleSlot({ row }: ReplicaFacts): boolean {
  return row.interruptible || row.fallback;
}

/** The kinds of `count` launches filling a gap, given the serving replicas. */
export function launchKinds(capacity: CapacitySettings, target: number, serving: readonly ReplicaFacts[], count: number): LaunchKind[] {
  const base = capacity.interruptible ? Math.min(capacity.onDemandBase, target) : target;
  let onDemand = serving.filter((f) => !inInterruptibleSlot(f)).length;
  return Array.from({ length: count }, () => {
    if (onDemand < base) {
      onDemand++;
      return { interruptible: false, fallback: false };
    }
    return { interruptible: true, fallback: capacity.fallback };
  });
}

/**
 * How many fallbacks may drain now: as many as leave at least `target` ready replicas. The
 * ready fallbacks go first on a scale-down too (they cost more than the bids that replace them).
 */
export function drainableFallbacks(target: number, serving: readonly ReplicaFacts[]): ReplicaFacts[] {
  const fallbacks = serving.filter(isFallback);
  const readyOthers = serving.filter((f) => !isFallback(f) && replicaState(f) === "ready").length;
  const count = Math.max(0, Math.min(fallbacks.length, readyOthers + fallbacks.length - target));
  return [...fallbacks].sort((a, b) => b.row.createdAt.getTime() - a.row.createdAt.getTime()).slice(0, count);
}

/** Whether to launch an interruptible replica to take a fallback's place now (no other on its way). */
export function wantsReturn(capacity: CapacitySettings, target: number, serving: readonly ReplicaFacts[]): boolean {
  if (!capacity.interruptible) return false;
  const fallbacks = serving.filter(isFallback).length;
  const others = serving.filter((f) => !isFallback(f));
  const coming = others.filter((f) => inInterruptibleSlot(f) && replicaState(f) !== "ready").length;
  return fallbacks > 0 && others.length < target && coming === 0;
}
