import type { EndpointRecord } from "./endpoint-store.js";
import { endedReason, isMachineUp, replicaState, type ReplicaFacts } from "./replica-state.js";

// The controller's decisions (SPEC.md section 2, "Endpoints"), as one pure function from the
// stored endpoint and what was observed of its replicas to the actions of one round. The loop
// around it (endpoint-controller.ts) does the I/O. The rules:
// - a replica whose machine ended is removed (and replaced by the launches below);
// - a replica failing its probes for unhealthyMs, or never ready within startTimeoutMs, is
//   condemned: no longer counted as serving, destroyed once the others are enough (surge first),
//   or at once when no launch fits beside it (the old one goes first);
// - healthy replicas are never touched because another failed;
// - surplus replicas (scale down) that are not ready are destroyed at once, ready ones drain for
//   drainMs first;
// - launches fill the gap, never past replicas + 1 machines; the executor checks the budget
//   against the prices actually rented.

export interface PlanSettings {
  unhealthyMs: number;
  startTimeoutMs: number;
  drainMs: number;
  /** How long a replica row may wait for its instance record before its launch counts as lost. */
  missingGraceMs: number;
}

export type Action =
  /** The machine is over: destroy what remains of it (an exited machine still bills its disk) and drop the replica. */
  | { kind: "remove"; instanceId: string; reason: string; neverReady: boolean }
  /** Judged for replacement now (the unhealthy event). */
  | { kind: "condemn"; instanceId: string; reason: string }
  /** A condemned replica is destroyed: its replacement is ready, or it must make room. */
  | { kind: "retire"; instanceId: string; reason: string }
  /** Scale down: a ready replica stops getting requests; destroyed after drainMs. */
  | { kind: "drain"; instanceId: string }
  | { kind: "drained"; instanceId: string }
  /** Scale down: a replica not ready yet is destroyed at once. */
  | { kind: "scale_in"; instanceId: string }
  /** One more replica; `makeRoom` is a condemned replica to retire instead when no launch fits beside it. */
  | { kind: "launch"; makeRoom?: string };

/** Order in which surplus replicas go: those not serving yet first, the newest first. */
const SCALE_IN_ORDER = { provisioning: 0, starting: 1, unhealthy: 2, ready: 3, draining: 4 } as const;

export function planEndpoint(endpoint: EndpointRecord, replicas: readonly ReplicaFacts[], now: Date, settings: PlanSettings): Action[] {
  const actions: Action[] = [];
  const live: ReplicaFacts[] = [];
  for (const facts of replicas) {
    const ended = endedReason(facts, now, settings.missingGraceMs);
    if (ended) actions.push({ kind: "remove", instanceId: facts.row.instanceId, reason: ended, neverReady: facts.row.readySince === null });
    else live.push(facts);
  }
  const serving: ReplicaFacts[] = [];
  const condemned: ReplicaFacts[] = [];
  for (const facts of live) {
    const { row } = facts;
    if (row.draining) {
      if (row.drainingSince && now.getTime() - row.drainingSince.getTime() >= settings.drainMs) {
        actions.push({ kind: "drained", instanceId: row.instanceId });
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
  actions.push(...scaleIn(serving, endpoint.replicas));

  const ready = serving.filter((f) => replicaState(f) === "ready").length;
  const retirable = condemned.filter((f) => canDestroy(f));
  if (ready >= endpoint.replicas) {
    // The replacements are ready (or none are wanted): the condemned ones go.
    for (const f of retirable) actions.push({ kind: "retire", instanceId: f.row.instanceId, reason: "its replacement is ready" });
    return actions;
  }
  let machines = live.length;
  const deficit = endpoint.replicas - serving.length;
  for (let i = 0; i < deficit; i++) {
    if (machines + 1 > endpoint.replicas + 1) {
      // No room for a surge: the old one goes first.
      const old = retirable.shift();
      if (!old) break;
      actions.push({ kind: "retire", instanceId: old.row.instanceId, reason: "no room for a replacement beside it" });
      machines--;
    }
    actions.push({ kind: "launch", ...(retirable[0] ? { makeRoom: retirable[0].row.instanceId } : {}) });
    machines++;
  }
  return actions;
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

/** A replica whose creation is still waiting for the marketplace's answer cannot be destroyed yet. */
function canDestroy({ record }: ReplicaFacts): boolean {
  return record === null || record.marketInstanceId !== null || record.status !== "creating";
}

function scaleIn(serving: readonly ReplicaFacts[], replicas: number): Action[] {
  const surplus = serving.length - replicas;
  if (surplus <= 0) return [];
  const order = [...serving].sort(
    (a, b) => SCALE_IN_ORDER[replicaState(a)] - SCALE_IN_ORDER[replicaState(b)] || b.row.createdAt.getTime() - a.row.createdAt.getTime(),
  );
  return order
    .filter(canDestroy)
    .slice(0, surplus)
    .map((f): Action => (replicaState(f) === "ready" && isMachineUp(f.record) ? { kind: "drain", instanceId: f.row.instanceId } : { kind: "scale_in", instanceId: f.row.instanceId }));
}
