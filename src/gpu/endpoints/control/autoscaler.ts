import type { AutoscaleMemory, AutoscaleSettings } from "../resource/endpoint-store.js";

// The autoscaler (SPEC.md section 2, "Endpoints that follow their load"), as one pure function:
// the endpoint's settings, its target and what it remembers of its load, the load now, in; the
// new target, what to remember and the event that tells a change, out. The plan calls it first
// and plans the replicas for the target it gives (endpoint-plan.ts). The rules:
// - wanted = ceil(load / target_in_flight) within [min_replicas, max_replicas], load being the
//   requests in flight through every process's proxy plus those held there;
// - the target rises once wanted has stayed above it for scale_up_after_s, to the least wanted
//   in that time (what the load held up all along), and falls once wanted has stayed below it for
//   scale_down_after_s, to the most wanted in that time: never faster, and never below what a
//   request in that time needed. A request seen only through `lastRequestAt` (it came and went
//   between two samples) counts for its moment, as one replica wanted: when that is the whole
//   target, the time below it starts again after that request, so that the endpoint goes idle
//   scale_down_after_s after its last request, however short its requests were;
// - at zero, any request wakes the endpoint at once (event `woke`), to at least one replica: one
//   held now, or one that arrived since it went idle and is gone already (its caller gave up, or
//   holding is off). It went idle scale_down_after_s after the request before, so a request
//   within scale_down_after_s is one that found it idle;
// - falling to zero is `idle`, any other change `scaled`.

export type { AutoscaleMemory, AutoscaleSettings };

export const NO_MEMORY: AutoscaleMemory = { direction: null, since: null, bound: null };

/** An endpoint's load summed over every service process (the proxies publish it). */
export interface LoadNow {
  inFlight: number;
  held: number;
  /** When a request last arrived at any proxy; null: none known. */
  lastRequestAt: Date | null;
}

export interface TargetChange {
  from: number;
  to: number;
  kind: "scaled" | "woke" | "idle";
  why: string;
}

export interface AutoscaleDecision {
  target: number;
  memory: AutoscaleMemory;
  change?: TargetChange;
}

export function autoscale(settings: AutoscaleSettings, target: number, memory: AutoscaleMemory, load: LoadNow, now: Date): AutoscaleDecision {
  const demand = load.inFlight + load.held;
  const wanted = clamp(Math.ceil(demand / settings.targetInFlight), settings);
  const why = `load ${demand} (${load.inFlight} in flight, ${load.held} held), ${settings.targetInFlight} per replica`;
  if (target === 0) {
    const knocked = load.lastRequestAt !== null && now.getTime() - load.lastRequestAt.getTime() < settings.scaleDownAfterS * 1000;
    if (load.held > 0 || knocked) {
      const to = Math.max(1, wanted);
      const reason = load.held > 0 ? "a request is held" : `a request arrived at ${load.lastRequestAt!.toISOString()}`;
      return { target: to, memory: NO_MEMORY, change: { from: 0, to, kind: "woke", why: `${why}: ${reason}` } };
    }
  }
  const inRange = clamp(target, settings);
  if (inRange !== target) {
    // Settings changed under the target: it moves into the new range at once.
    return changed(target, inRange, `${why}: the range is now ${settings.minReplicas}..${settings.maxReplicas}`);
  }
  if (wanted === target) return { target, memory: NO_MEMORY };
  const direction = wanted > target ? "up" : "down";
  const continuing = memory.direction === direction && memory.since !== null && memory.bound !== null;
  let since = continuing ? memory.since! : now;
  let bound = continuing ? (direction === "up" ? Math.min(memory.bound!, wanted) : Math.max(memory.bound!, wanted)) : wanted;
  if (direction === "down" && load.lastRequestAt !== null && load.lastRequestAt >= since) {
    // A request that came and went between two samples needed a replica at its moment.
    const needed = clamp(1, settings);
    if (needed < target) bound = Math.max(bound, needed);
    else {
      // It needed the whole target: wanted was not below it then, so the time below starts after it.
      since = load.lastRequestAt < now ? load.lastRequestAt : now;
      bound = wanted;
    }
  }
  const after = (direction === "up" ? settings.scaleUpAfterS : settings.scaleDownAfterS) * 1000;
  const waited = now.getTime() - since.getTime();
  if (waited < after || bound === target) return { target, memory: { direction, since, bound } };
  const seconds = Math.round(waited / 1000);
  const decision = changed(target, bound, `${why}: wanted ${direction === "up" ? "above" : "below"} ${target} for ${seconds} s`);
  // Wanted still away from the new target: the next window starts now.
  if (wanted !== bound) decision.memory = { direction: wanted > bound ? "up" : "down", since: now, bound: wanted };
  return decision;
}

function changed(from: number, to: number, why: string): AutoscaleDecision {
  return { target: to, memory: NO_MEMORY, change: { from, to, kind: to === 0 ? "idle" : "scaled", why } };
}

function clamp(n: number, settings: AutoscaleSettings): number {
  return Math.min(settings.maxReplicas, Math.max(settings.minReplicas, n));
}
