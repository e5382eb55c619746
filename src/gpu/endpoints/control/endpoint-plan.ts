import type { EndpointLoad } from "../load/load-store.js";
import { DIRECTORY_CACHE_MS } from "../resource/endpoint-directory.js";
import type { AutoscaleMemory, CapacitySettings, EndpointRecord } from "../resource/endpoint-store.js";
import { billedCost, endedReason, replicaState, type ReplicaFacts } from "../replicas/replica-state.js";
import { autoscale, type TargetChange } from "./autoscaler.js";
import { goingNow, launchKinds, misplaced, mixLaunch, whyMisplaced, type LaunchKind, type MixLaunch } from "./capacity-mix.js";

// The controller's decisions (SPEC.md section 2, "Endpoints", "Endpoints that follow their
// load"), as one pure function from the stored endpoint, what was observed of its replicas and
// the load summed over every proxy to the actions of one round. The loop around it
// (endpoint-controller.ts) does the I/O. The rules:
// - an autoscaled endpoint's target comes first, from the autoscaler (autoscaler.ts): the rules
//   below keep that many replicas;
// - a replica the controller already decided to destroy is finished (destroyed, its event
//   written), whoever confirmed the destroy; it bills until then;
// - a replica whose machine ended by itself is removed (and replaced by the launches below); a
//   preempted (outbid) interruptible one too, and its replacement ignores the launch backoff;
// - a replica failing its probes for unhealthyMs, or never ready within startTimeoutMs, is
//   condemned: no longer counted as serving, destroyed once the others are enough (surge first),
//   or at once when no launch fits beside it (the old one goes first);
// - healthy replicas are never touched because another failed;
// - spend over the budget (it was lowered) sheds replicas, the condemned first, then the
//   costliest, each draining if it may hold a request; nothing launches meanwhile;
// - surplus replicas (scale down) go those not serving yet first, then the unhealthy, then the
//   ready, each group the fewest requests in flight first; one whose creation still waits for the
//   marketplace is waited for, never swapped for a ready one; every replica that may still hold
//   a request (it was ever ready) drains for drainMs first (counted from when no process can
//   route to it any more);
// - a gap is filled by taking draining replicas back first, then by launches, never past
//   replicas + 1 machines; the executor checks the budget against the prices actually rented;
// - each launch's kind (on-demand, or interruptible with or without fallback), and the way the mix
//   moves to the capacity (a fallback's way back to a bid, a PATCH of the capacity), come from
//   the endpoint's capacity (capacity-mix.ts): the misplaced replicas go first on a scale-down;
//   once none is left, the moves' backoff and wait start over (a converged mix).

export interface PlanSettings {
  unhealthyMs: number;
  startTimeoutMs: number;
  drainMs: number;
  /** How long a replica row may wait for its instance record before its launch counts as lost. */
  missingGraceMs: number;
}

export type Action =
  /** The controller decided to destroy it earlier: destroy what is left and write the decision's event. */
  | { kind: "finish"; instanceId: string }
  /** The machine is over: destroy what remains of it (an exited machine still bills its disk) and drop the replica. */
  | { kind: "remove"; instanceId: string; reason: string; neverReady: boolean; preempted: boolean }
  /** Judged for replacement now (the unhealthy event). */
  | { kind: "condemn"; instanceId: string; reason: string }
  /** A condemned replica is destroyed: its replacement is ready, or it must make room. */
  | { kind: "retire"; instanceId: string; reason: string }
  /** A replica that may hold requests stops getting new ones; destroyed after drainMs. */
  | { kind: "drain"; instanceId: string; reason: string }
  /** The drain is over: destroyed; `inFlight` requests the proxies still count on it are cut. */
  | { kind: "drained"; instanceId: string; inFlight: number }
  /** Scaling back up: a draining replica serves again instead of a new launch. */
  | { kind: "undrain"; instanceId: string }
  /** A replica that never served is destroyed at once. */
  | { kind: "scale_in"; instanceId: string; reason: string }
  /**
   * One more replica, of a kind (capacity-mix.ts); `makeRoom` is a condemned replica to retire
   * instead when no launch fits beside it. With `replaces`, it takes a misplaced replica's place
   * (its own backoff, never a budget hold).
   */
  | ({ kind: "launch"; makeRoom?: string } & LaunchKind & Partial<Omit<MixLaunch, keyof LaunchKind>>)
  /** The budget holds the endpoint back (it was lowered below what runs). */
  | { kind: "hold_budget"; detail: string }
  /** The autoscaler moves the target (events scaled, woke, idle). */
  | { kind: "retarget"; change: TargetChange }
  /** What the autoscaler remembers of the load until the next round. */
  | { kind: "remember"; memory: AutoscaleMemory }
  /** Nothing is left to move in the mix: its backoff and its wait for a bid start over. */
  | { kind: "mix_settled" };

/** The load of an endpoint as the proxies published it; none: nothing in flight, nothing held. */
export const NO_LOAD: EndpointLoad = { inFlight: 0, held: 0, byReplica: new Map(), lastRequestAt: null };

/** Order in which surplus replicas go: those not serving yet first, the newest first. */
const SCALE_IN_ORDER = { provisioning: 0, starting: 1, unhealthy: 2, ready: 3, draining: 4 } as const;

export function planEndpoint(
  stored: EndpointRecord,
  replicas: readonly ReplicaFacts[],
  now: Date,
  settings: PlanSettings,
  load: EndpointLoad = NO_LOAD,
): Action[] {
  const actions: Action[] = [];
  const endpoint = { ...stored, replicas: targetOf(stored, load, now, actions) };
  const live: ReplicaFacts[] = [];
  const leaving: ReplicaFacts[] = [];
  for (const facts of replicas) {
    const ended = endedReason(facts, now, settings.missingGraceMs);
    if (facts.row.destroyingAt !== null) {
      actions.push({ kind: "finish", instanceId: facts.row.instanceId });
      leaving.push(facts);
    } else if (ended) {
      const preempted = facts.record?.preemptedAt != null;
      actions.push({ kind: "remove", instanceId: facts.row.instanceId, reason: ended, neverReady: facts.row.readySince === null, preempted });
    } else {
      live.push(facts);
    }
  }
  const serving: ReplicaFacts[] = [];
  const condemned: ReplicaFacts[] = [];
  const draining: ReplicaFacts[] = [];
  for (const facts of live) {
    const { row } = facts;
    if (row.draining) {
      // Processes whose directory answer predates the drain still send it requests for up to
      // DIRECTORY_CACHE_MS: the last of those gets the whole drainMs too.
      if (row.drainingSince && now.getTime() - row.drainingSince.getTime() >= settings.drainMs + DIRECTORY_CACHE_MS) {
        actions.push({ kind: "drained", instanceId: row.instanceId, inFlight: load.byReplica.get(row.instanceId) ?? 0 });
        leaving.push(facts);
      } else {
        draining.push(facts);
      }
      continue;
    }
    if (row.condemnedAt !== null) {
      condemned.push(facts);
      continue;
    }
    const reason = condemnReason(facts, now, settings);
    if (reason) {
      actions.push({ kind: "condemn", instanceId: row.instanceId, reason });
      condemned.push(facts);
    } else {
      serving.push(facts);
    }
  }

  const overBudget = shedOverBudget(endpoint, [...serving, ...condemned, ...draining], serving, condemned, draining);
  if (overBudget.length > 0) return [...actions, ...overBudget];

  const target = endpoint.replicas;
  // Replicas of a kind the capacity no longer wants go once enough others are ready.
  const out = misplaced(endpoint.capacity, target, inScaleInOrder(serving, load));
  if (out.length === 0 && mixUnsettled(stored)) actions.push({ kind: "mix_settled" });
  const surplus = serving.length > target;
  const outNow = goingNow(target, serving, out.filter(canDestroy));
  // One that a replica launched in its place makes surplus goes for the move, not for a scale-down.
  const replaced = (f: ReplicaFacts) => serving.some((other) => other.row.replaces === f.row.instanceId);
  for (const f of outNow) actions.push(goes(f, surplus && !replaced(f) ? `scale down to ${target}` : whyMisplaced(endpoint.capacity, f)));
  const kept = serving.filter((f) => !outNow.includes(f));
  const stillOut = out.filter((f) => !outNow.includes(f));
  actions.push(...scaleIn(kept.filter((f) => !out.includes(f)), target, load));
  let machines = live.length + leaving.length;
  const ready = kept.filter((f) => replicaState(f) === "ready").length;
  const retirable = condemned.filter((f) => canDestroy(f));
  if (ready >= target) {
    // The replacements are ready (or none are wanted): the condemned ones go.
    for (const f of retirable) actions.push({ kind: "retire", instanceId: f.row.instanceId, reason: "its replacement is ready" });
    return [...actions, ...moveMix(endpoint.capacity, target, kept, stillOut, machines - retirable.length)];
  }
  let deficit = target - kept.length;
  // Draining replicas were ready moments ago and hold their model: take them back before renting,
  // as far as the budget lets them stay (a replica shed for the budget keeps draining).
  let room = endpoint.maxCostPerHour - [...kept, ...condemned].reduce((sum, f) => sum + billedCost(f), 0);
  for (const f of newestFirst(draining)) {
    if (deficit <= 0) break;
    if (billedCost(f) > room + 1e-9) continue;
    actions.push({ kind: "undrain", instanceId: f.row.instanceId });
    room -= billedCost(f);
    deficit--;
  }
  const kinds = launchKinds(endpoint.capacity, target, kept, Math.max(0, deficit));
  for (const kind of kinds) {
    if (machines + 1 > target + 1) {
      // No room for a surge: the old one goes first.
      const old = retirable.shift();
      if (!old) break;
      actions.push({ kind: "retire", instanceId: old.row.instanceId, reason: "no room for a replacement beside it" });
      machines--;
    }
    actions.push({ kind: "launch", ...kind, ...(retirable[0] ? { makeRoom: retirable[0].row.instanceId } : {}) });
    machines++;
  }
  return deficit > 0 ? actions : [...actions, ...moveMix(endpoint.capacity, target, kept, stillOut, machines)];
}

/** Whether the moves of the mix still carry a backoff or a wait from an earlier wave. */
function mixUnsettled(endpoint: EndpointRecord): boolean {
  return endpoint.mixFailures > 0 || endpoint.nextMixAt !== null || endpoint.mixWaitSince !== null;
}

/** One launch that takes a misplaced replica's place, when one may go beside them (replicas + 1). */
function moveMix(capacity: CapacitySettings, target: number, serving: readonly ReplicaFacts[], out: readonly ReplicaFacts[], machines: number): Action[] {
  const launch = mixLaunch(capacity, target, serving, out);
  return launch === undefined || machines + 1 > target + 1 ? [] : [{ kind: "launch", ...launch }];
}

/** A replica leaving: drained when it may hold requests (it was ever ready), else destroyed at once. */
function goes(f: ReplicaFacts, reason: string): Action {
  const { instanceId } = f.row;
  return f.row.readySince !== null ? { kind: "drain", instanceId, reason } : { kind: "scale_in", instanceId, reason };
}

/** The replicas to keep: the caller's count, or the autoscaler's target (its actions added). */
function targetOf(endpoint: EndpointRecord, load: EndpointLoad, now: Date, actions: Action[]): number {
  if (!endpoint.autoscale) return endpoint.replicas;
  const decision = autoscale(endpoint.autoscale, endpoint.replicas, endpoint.autoscaleMemory, load, now);
  if (decision.change) actions.push({ kind: "retarget", change: decision.change });
  if (!sameMemory(decision.memory, endpoint.autoscaleMemory)) actions.push({ kind: "remember", memory: decision.memory });
  return decision.target;
}

function sameMemory(a: AutoscaleMemory, b: AutoscaleMemory): boolean {
  return a.direction === b.direction && a.bound === b.bound && a.since?.getTime() === b.since?.getTime();
}

/**
 * A budget lowered below what runs: the replicas that bill past it go, the condemned first, then
 * the costliest serving ones; draining ones are going already. Empty when within the budget.
 */
function shedOverBudget(
  endpoint: EndpointRecord,
  staying: readonly ReplicaFacts[],
  serving: readonly ReplicaFacts[],
  condemned: readonly ReplicaFacts[],
  draining: readonly ReplicaFacts[],
): Action[] {
  const budget = endpoint.maxCostPerHour;
  const total = staying.reduce((sum, f) => sum + billedCost(f), 0);
  let spend = total - draining.reduce((sum, f) => sum + billedCost(f), 0);
  if (spend <= budget + 1e-9) return [];
  const shed: Action[] = [];
  const reason = `over its budget of $${budget}/h`;
  const costliest = [...serving].sort((a, b) => billedCost(b) - billedCost(a));
  for (const f of [...condemned, ...costliest]) {
    if (spend <= budget + 1e-9) break;
    if (!canDestroy(f) || billedCost(f) === 0) continue;
    spend -= billedCost(f);
    const { instanceId } = f.row;
    if (condemned.includes(f)) shed.push({ kind: "retire", instanceId, reason });
    else shed.push(goes(f, reason));
  }
  const detail = `its machines cost $${round(total)}/h, over its budget of $${budget}/h: ${shed.length} replica(s) shed`;
  return [...shed, { kind: "hold_budget", detail }];
}

function condemnReason({ row, record }: ReplicaFacts, now: Date, settings: PlanSettings): string | undefined {
  const since = (at: Date) => now.getTime() - at.getTime();
  if (row.readySince !== null && row.failingSince !== null && since(row.failingSince) >= settings.unhealthyMs) {
    return `its model server failed every probe for ${seconds(since(row.failingSince))} s`;
  }
  if (row.readySince === null && since(row.createdAt) >= settings.startTimeoutMs) {
    return `it was not ready within ${seconds(settings.startTimeoutMs)} s of its launch (${record?.status ?? "no record"})`;
  }
  return undefined;
}

/** Milliseconds as seconds with at most one decimal, for event details. */
function seconds(ms: number): number {
  return Math.round(ms / 100) / 10;
}

function round(dollars: number): number {
  return Math.round(dollars * 10_000) / 10_000;
}

/** A replica whose creation is still waiting for the marketplace's answer cannot be destroyed yet. */
function canDestroy({ record }: ReplicaFacts): boolean {
  return record === null || record.marketInstanceId !== null || record.status !== "creating";
}

function newestFirst(replicas: readonly ReplicaFacts[]): ReplicaFacts[] {
  return [...replicas].sort((a, b) => b.row.createdAt.getTime() - a.row.createdAt.getTime());
}

/** Serving replicas in the order they go: those not serving yet first, then the fewest requests in flight, the newest first. */
function inScaleInOrder(serving: readonly ReplicaFacts[], load: EndpointLoad): ReplicaFacts[] {
  const inFlight = (f: ReplicaFacts) => load.byReplica.get(f.row.instanceId) ?? 0;
  return [...serving].sort(
    (a, b) =>
      SCALE_IN_ORDER[replicaState(a)] - SCALE_IN_ORDER[replicaState(b)] ||
      inFlight(a) - inFlight(b) ||
      b.row.createdAt.getTime() - a.row.createdAt.getTime(),
  );
}

function scaleIn(serving: readonly ReplicaFacts[], replicas: number, load: EndpointLoad): Action[] {
  const surplus = serving.length - replicas;
  if (surplus <= 0) return [];
  const reason = `scale down to ${replicas}`;
  // The chosen ones whose creation still waits for the marketplace go once it answers; a ready
  // replica is never drained in their place.
  return inScaleInOrder(serving, load)
    .slice(0, surplus)
    .filter(canDestroy)
    .map((f) => goes(f, reason));
}
