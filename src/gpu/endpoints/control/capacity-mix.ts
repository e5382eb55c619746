import type { CapacitySettings } from "../resource/endpoint-store.js";
import { billedCost, replicaState, type ReplicaFacts } from "../replicas/replica-state.js";

// How an endpoint's replicas are rented (SPEC.md section 2, "Interruptible replicas with on-demand
// fallback"), as pure rules the plan asks. The capacity wants `on_demand_base` on-demand machines
// and bids for the rest (every machine on-demand without `interruptible`). A replica whose kind of
// machine it no longer wants is misplaced: an on-demand one past the base (a fallback that stood
// in for a bid, or one a PATCH turned into a bid's place), or a bid past the bids' share (a PATCH
// turned `interruptible` off or raised the base), or one rented in a market that `capacity.markets`
// no longer names (a PATCH narrowed them). The mix converges as a fallback returns:
// - a gap (a replica missing) is filled first, each launch of the kind still short: on-demand up
//   to the base, then bids that may fall back to on-demand when no bid fits;
// - then one launch at a time takes a misplaced replica's place, beside it (a surge within
//   replicas + 1): a bid, or nothing, that costs at most 90% of the on-demand machine it replaces
//   (slot-offers.ts); or an on-demand machine for a bid;
// - a misplaced replica goes once the replicas left keep at least the target ready (never fewer
//   ready than before), so on a scale-down the misplaced ones go first (fallbacks first: they
//   cost more than the bids that replace them).
// A replica's slot is written on its row when it is launched; one launched for an interruptible
// slot whose record rents on-demand (no bid fitted) is a fallback: its row says so once the
// launch answered, and its record says so even if the process died before.

export interface LaunchKind {
  /** The slot: an interruptible bid, or on-demand. */
  interruptible: boolean;
  /** For an interruptible slot: rent on-demand when no bid fits (a fallback). */
  fallback: boolean;
}

/** A launch that takes a misplaced replica's place: a bid must cost at most 90% of `replacing` ($/h, what the replaced machine bills). */
export interface MixLaunch extends LaunchKind {
  replaces: string;
  replacing?: number;
}

export function isFallback({ row, record }: ReplicaFacts): boolean {
  return row.fallback || (row.interruptible && record !== null && !record.interruptible);
}

/** Whether the replica's machine is on-demand: as its record rents it, or, before it has one, as its slot. */
function isOnDemand({ row, record }: ReplicaFacts): boolean {
  return record !== null ? !record.interruptible : !row.interruptible;
}

/** How many on-demand machines the capacity wants for `target` replicas; the rest are bids. */
function onDemandWanted(capacity: CapacitySettings, target: number): number {
  return capacity.interruptible ? Math.min(capacity.onDemandBase, target) : target;
}

/** The kinds of `count` launches filling a gap, given the serving replicas. */
export function launchKinds(capacity: CapacitySettings, target: number, serving: readonly ReplicaFacts[], count: number): LaunchKind[] {
  const wanted = onDemandWanted(capacity, target);
  let onDemand = serving.filter(isOnDemand).length;
  return Array.from({ length: count }, () => {
    if (onDemand < wanted) {
      onDemand++;
      return { interruptible: false, fallback: false };
    }
    return { interruptible: true, fallback: capacity.fallback };
  });
}

/**
 * The serving replicas whose kind of machine the capacity no longer wants, the first to go first:
 * `inOrder` comes in the order replicas go (the plan's scale-in order), fallbacks go before the
 * other on-demand ones, and of a kind those in a market `capacity.markets` left out go first.
 */
export function misplaced(capacity: CapacitySettings, target: number, inOrder: readonly ReplicaFacts[]): ReplicaFacts[] {
  // Of a kind with one too many, the one in a market left out goes first.
  const serving = [...inOrder.filter((f) => outsideMarkets(capacity, f)), ...inOrder.filter((f) => !outsideMarkets(capacity, f))];
  const onDemand = serving.filter(isOnDemand);
  const bids = serving.filter((f) => !isOnDemand(f));
  const bidsWanted = target - onDemandWanted(capacity, target);
  const extraOnDemand = capacity.interruptible
    ? [...onDemand.filter(isFallback), ...onDemand.filter((f) => !isFallback(f))].slice(0, Math.max(0, onDemand.length - onDemandWanted(capacity, target)))
    : [];
  const wrongKind = [...extraOnDemand, ...bids.slice(0, Math.max(0, bids.length - bidsWanted))];
  // A replica in a market the endpoint no longer rents from goes too, whatever its kind.
  const wrongMarket = serving.filter((f) => outsideMarkets(capacity, f) && !wrongKind.includes(f));
  return [...wrongKind, ...wrongMarket];
}

/** Rented in a market `capacity.markets` does not name (an empty list names every market). */
function outsideMarkets(capacity: CapacitySettings, { record }: ReplicaFacts): boolean {
  return capacity.markets.length > 0 && record?.market != null && record.market !== "" && !capacity.markets.includes(record.market);
}

/** Of the misplaced replicas, those that may go now: the rest keep at least `target` replicas, and `target` ready. */
export function goingNow(target: number, serving: readonly ReplicaFacts[], out: readonly ReplicaFacts[]): ReplicaFacts[] {
  let ready = serving.filter((f) => replicaState(f) === "ready").length;
  let count = serving.length;
  const going: ReplicaFacts[] = [];
  for (const f of out) {
    const isReady = replicaState(f) === "ready";
    if (count - 1 < target || (isReady && ready - 1 < target)) continue;
    going.push(f);
    count--;
    if (isReady) ready--;
  }
  return going;
}

/**
 * The one launch that takes a misplaced replica's place, when the others are fewer than the
 * target and every serving replica is ready (none on its way, not even a fallback that is still
 * starting: the move waits for it rather than replace it before it served): a bid only, worth
 * the move from the on-demand machine it replaces, or an on-demand machine for a bid. Undefined
 * when none is wanted now.
 */
export function mixLaunch(capacity: CapacitySettings, target: number, serving: readonly ReplicaFacts[], out: readonly ReplicaFacts[]): MixLaunch | undefined {
  const first = out[0];
  if (first === undefined) return undefined;
  const others = serving.filter((f) => !out.includes(f));
  if (others.length >= target || serving.some((f) => replicaState(f) !== "ready")) return undefined;
  const replaces = first.row.instanceId;
  // Of the right kind but in a market left out: the same kind again, in the markets named (a bid
  // or nothing for a bid, so that a move never turns a bid into an on-demand machine).
  if (outsideMarkets(capacity, first) && !misplacedByKind(capacity, target, serving, first)) {
    return isOnDemand(first) ? { interruptible: false, fallback: false, replaces } : { interruptible: true, fallback: false, replaces };
  }
  if (!isOnDemand(first)) return { interruptible: false, fallback: false, replaces };
  const cost = billedCost(first);
  return { interruptible: true, fallback: false, replaces, ...(cost > 0 ? { replacing: cost } : {}) };
}

/** Whether the replica is misplaced for its kind of machine alone (not for its market). */
function misplacedByKind(capacity: CapacitySettings, target: number, serving: readonly ReplicaFacts[], f: ReplicaFacts): boolean {
  return misplaced({ ...capacity, markets: [] }, target, serving).includes(f);
}

/** Why a misplaced replica goes, for its event. */
export function whyMisplaced(capacity: CapacitySettings, f: ReplicaFacts): string {
  if (outsideMarkets(capacity, f)) return `a replica in one of capacity.markets (${capacity.markets.join(", ")}) that takes its place is ready: ${f.record!.market} is no longer among them`;
  if (isFallback(f)) return "an interruptible replica that takes its place is ready";
  if (isOnDemand(f)) return `a bid that takes its place is ready (on_demand_base ${capacity.onDemandBase})`;
  const setting = capacity.interruptible ? `on_demand_base ${capacity.onDemandBase}` : "interruptible off";
  return `an on-demand replica that takes its place is ready (${setting})`;
}
