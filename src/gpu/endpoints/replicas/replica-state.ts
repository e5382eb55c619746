import type { InstanceRecord } from "../../store/instance-store.js";
import { isTerminal } from "../../store/status.js";
import type { EndpointRecord } from "../resource/endpoint-store.js";
import type { ReplicaRow } from "../resource/replica-store.js";

// The states SPEC.md section 2 shows for an endpoint and its replicas, from what is stored:
// the replica's row (probes, draining) and its instance record (the marketplace's status, as the
// sync loop keeps it). Pure, so that the rules are tested on their own.

export const REPLICA_STATES = ["provisioning", "starting", "ready", "unhealthy", "draining"] as const;
export type ReplicaState = (typeof REPLICA_STATES)[number];

export const ENDPOINT_STATES = ["starting", "ready", "degraded", "parked", "idle", "deleting", "deleted"] as const;
export type EndpointState = (typeof ENDPOINT_STATES)[number];

/** A replica as the controller sees it: its row, and its instance record (null until written). */
export interface ReplicaFacts {
  row: ReplicaRow;
  record: InstanceRecord | null;
}

/** Statuses in which the machine is up, so that its model server can be probed. */
const UP_STATUSES = new Set(["running", "running_llm"]);

export function isMachineUp(record: InstanceRecord | null): record is InstanceRecord {
  return record !== null && record.marketInstanceId !== null && UP_STATUSES.has(record.status);
}

/** What the replica's machine bills now, $/h: its rented price until the machine is over. */
export function billedCost({ record }: ReplicaFacts): number {
  return record && !isTerminal(record.status) ? record.costPerHour : 0;
}

export function replicaState({ row, record }: ReplicaFacts): ReplicaState {
  // Being destroyed takes no new request either.
  if (row.draining || row.destroyingAt !== null) return "draining";
  if (row.readySince !== null) return row.failedProbes === 0 ? "ready" : "unhealthy";
  return isMachineUp(record) ? "starting" : "provisioning";
}

/** Whether the proxy may send it requests: ready, not draining, not judged for replacement. */
export function isRoutable(facts: ReplicaFacts): boolean {
  return replicaState(facts) === "ready" && facts.row.condemnedAt === null && isMachineUp(facts.record);
}

/**
 * The state an endpoint's view and metrics report, counted as `ready_replicas` counts: a ready
 * replica out of routing (its machine over, or being replaced) reads `unhealthy` (it was ready and
 * is not routed) until the controller's next round ends or replaces it, rather than `ready`.
 */
export function shownState(facts: ReplicaFacts): ReplicaState {
  const state = replicaState(facts);
  return state === "ready" && !isRoutable(facts) ? "unhealthy" : state;
}

/**
 * Why the replica's machine is over, or undefined while it is not: it exited, was destroyed
 * outside the endpoint or lost by the marketplace (the sync loop marks such records destroyed),
 * its creation failed, or its creation never got as far as a record within `missingGraceMs`.
 * Transient host states (rebooting, frozen: offline) are not an end.
 */
export function endedReason({ row, record }: ReplicaFacts, now: Date, missingGraceMs: number): string | undefined {
  if (record === null) {
    return now.getTime() - row.createdAt.getTime() >= missingGraceMs ? "its creation was interrupted before its record was written" : undefined;
  }
  switch (record.status) {
    case "exited":
      return record.preemptedAt !== null ? "its interruptible machine was preempted (outbid)" : "its machine exited";
    case "failed":
      return "its creation failed";
    case "destroyed":
      return record.preemptedAt !== null ? "its interruptible machine was preempted (outbid), then destroyed" : "its machine was destroyed or lost outside the endpoint";
    default:
      return undefined;
  }
}

export function endpointState(endpoint: EndpointRecord, replicas: readonly ReplicaFacts[]): EndpointState {
  if (endpoint.phase !== "active") return endpoint.phase;
  // At 0, a fixed endpoint stays down until a caller raises it (parked); an autoscaled one is
  // woken by its next request (idle).
  if (endpoint.replicas === 0) return endpoint.autoscale ? "idle" : "parked";
  const ready = replicas.filter(isRoutable).length;
  if (ready >= endpoint.replicas) return "ready";
  return endpoint.everReady || endpoint.budgetHeld ? "degraded" : "starting";
}
