import { ACTOR_SYSTEM } from "../../../actor.js";
import { destroyRecord } from "../../lifecycle/destroy.js";
import { isTerminal } from "../../store/status.js";
import type { EventKind } from "../resource/endpoint-events.js";
import type { EndpointRecord } from "../resource/endpoint-store.js";
import type { ReplicaFacts } from "../replicas/replica-state.js";
import { note, type Round, type RoundDeps } from "./control-round.js";
import type { Action } from "./endpoint-plan.js";
import { launchFailed } from "./replica-launch.js";

// The plan's actions on one replica that is there already (SPEC.md section 2, "Replacement",
// "Scale-down never cuts a request", "Preemption"): each destroy is written down first (the
// replica's destroying_at and the event it will tell), so that a destroy the marketplace confirms
// only later (the sync loop retries it) is finished by a later round with this same event.

type On<K extends Action["kind"]> = Extract<Action, { kind: K }>;

/** Destroys what remains of a replica's machine (unless it is over already), drops the replica, then writes its event. */
export async function finish(deps: RoundDeps, endpoint: EndpointRecord, facts: ReplicaFacts | undefined, instanceId: string, event: { kind: EventKind; detail: string } | null) {
  const record = facts?.record ?? null;
  // A launch given up while its market's answer is unknown: nothing to destroy until the
  // reconciler adopts its machine (destroyed then) or fails the record (dropped then).
  if (record?.status === "creating" && record.marketInstanceId === null) return;
  if (record && !isTerminal(record.status)) await destroyRecord(deps.ctx, ACTOR_SYSTEM, record, "destroy_instance");
  await deps.endpoints.replicas.remove(instanceId);
  if (event) await note(deps, endpoint, event.kind, event.detail, instanceId);
}

async function destroyReplica(deps: RoundDeps, endpoint: EndpointRecord, facts: ReplicaFacts | undefined, instanceId: string, kind: EventKind, detail: string) {
  await deps.endpoints.replicas.markDestroying(instanceId, { kind, detail });
  await finish(deps, endpoint, facts, instanceId, { kind, detail });
}

/** A machine that ended by itself: what remains of it is destroyed and the replica dropped. */
export async function remove(deps: RoundDeps, endpoint: EndpointRecord, round: Round, action: On<"remove">): Promise<void> {
  const { instanceId, reason } = action;
  const facts = round.byId.get(instanceId);
  const record = facts?.record ?? null;
  // A launch whose record never came is given up only if its record is not being written now.
  if (record === null && !(await deps.endpoints.replicas.removeUnclaimed(instanceId))) return;
  round.spend -= round.costOf(instanceId);
  // A launch that moved the mix (a bid back from a fallback) counts against the moves' backoff,
  // never against the launches that fill a gap: the replica it was to replace still serves.
  const move = facts?.row.replaces ? { replaces: facts.row.replaces } : undefined;
  if (record?.status === "failed") {
    // Nothing to destroy: a failed creation's machine is the creation's to release. The launch
    // that saw it fail may have removed the replica and counted the failure meanwhile: once only.
    if (!(await deps.endpoints.replicas.remove(instanceId))) return;
    return launchFailed(deps, endpoint, `${instanceId}: ${reason}`, instanceId, move);
  }
  if (action.preempted) {
    // Outbid, not failed: out of routing already, its storage stops billing, replaced at once.
    round.urgent = true;
    return destroyReplica(deps, endpoint, facts, instanceId, "preempted", `${instanceId} preempted: ${reason}; replaced at once`);
  }
  await destroyReplica(deps, endpoint, facts, instanceId, "ended", `${instanceId} ended: ${reason}`);
  if (action.neverReady) await launchFailed(deps, endpoint, `${instanceId} ended before it was ready`, instanceId, move);
}

/** A condemned replica goes: its replacement is ready, or it must make room. */
export async function retire(deps: RoundDeps, endpoint: EndpointRecord, round: Round, instanceId: string, reason: string): Promise<void> {
  round.spend -= round.costOf(instanceId);
  await destroyReplica(deps, endpoint, round.byId.get(instanceId), instanceId, "replaced", `${instanceId} destroyed: ${reason}`);
}

export async function condemn(deps: RoundDeps, endpoint: EndpointRecord, { instanceId, reason }: On<"condemn">): Promise<void> {
  await deps.endpoints.replicas.condemn(instanceId);
  await note(deps, endpoint, "unhealthy", `${instanceId} is replaced: ${reason}`, instanceId);
}

export async function drain(deps: RoundDeps, endpoint: EndpointRecord, { instanceId, reason }: On<"drain">): Promise<void> {
  await deps.endpoints.replicas.markDraining(instanceId);
  await note(deps, endpoint, "scaled", `${instanceId} drains for ${deps.settings.drainMs / 1000} s (${reason})`, instanceId);
}

export async function undrain(deps: RoundDeps, endpoint: EndpointRecord, { instanceId }: On<"undrain">): Promise<void> {
  await deps.endpoints.replicas.undrain(instanceId);
  await note(deps, endpoint, "scaled", `${instanceId} taken back from draining (scale up to ${endpoint.replicas})`, instanceId);
}

/**
 * The drain is over: destroyed. Requests still in flight on it past drainMs (a stream longer
 * than the drain) are cut: logged and counted, so that an operator sees a drain too short.
 */
export async function drained(deps: RoundDeps, endpoint: EndpointRecord, round: Round, { instanceId, inFlight }: On<"drained">): Promise<void> {
  let detail = `${instanceId} drained and destroyed`;
  if (inFlight > 0) {
    deps.ctx.logger.warn({ endpoint: endpoint.name, instance_id: instanceId, in_flight: inFlight, drain_ms: deps.settings.drainMs }, "drain ended with requests in flight; they are cut");
    deps.onDrainCut?.(endpoint.name, inFlight);
    detail += ` (${inFlight} request(s) still in flight after ${deps.settings.drainMs / 1000} s are cut)`;
  }
  await destroyReplica(deps, endpoint, round.byId.get(instanceId), instanceId, "drained", detail);
}

/**
 * A replica that never served is destroyed at once, unless a probe made it ready since the round
 * read it (the proxy may route to it already): then it drains instead.
 */
export async function scaleIn(deps: RoundDeps, endpoint: EndpointRecord, round: Round, { instanceId, reason }: On<"scale_in">): Promise<void> {
  const detail = `${instanceId} destroyed before it was ready (${reason})`;
  if (!(await deps.endpoints.replicas.markDestroying(instanceId, { kind: "scaled", detail }, { neverReady: true }))) {
    return drain(deps, endpoint, { kind: "drain", instanceId, reason: `${reason}; it became ready meanwhile` });
  }
  round.spend -= round.costOf(instanceId);
  await finish(deps, endpoint, round.byId.get(instanceId), instanceId, { kind: "scaled", detail });
}
