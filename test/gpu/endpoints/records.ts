import type { EndpointRecord } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import type { ReplicaRow } from "../../../src/gpu/endpoints/resource/replica-store.js";

// Stored endpoint and replica rows as the pure rules read them (the controller's plan, the
// endpoint's view), for table tests: every field at its plain value, created `createdAgo` before `now`.

export function endpointRecord(now: Date, fields: Partial<EndpointRecord> = {}): EndpointRecord {
  return {
    id: "1",
    name: "e",
    templateName: "budget",
    replicas: 2,
    maxCostPerHour: 10,
    customConfig: {},
    autoscale: null,
    autoscaleMemory: { direction: null, since: null, bound: null },
    capacity: { interruptible: false, onDemandBase: 0, fallback: true, bidMargin: 0.25, markets: [], spreadMarkets: false },
    routing: "prefix",
    phase: "active",
    everReady: true,
    budgetHeld: false,
    launchFailures: 0,
    nextLaunchAt: null,
    mixFailures: 0,
    nextMixAt: null,
    mixWaitSince: null,
    createdAt: new Date(now.getTime() - 3_600_000),
    deletedAt: null,
    ...fields,
  };
}

/** A replica of endpoint "1" created 10 minutes before `now`, never probed. */
export function replicaRow(now: Date, instanceId: string, fields: Partial<ReplicaRow> = {}): ReplicaRow {
  const tenMinutesAgo = new Date(now.getTime() - 600_000);
  return {
    instanceId,
    endpointId: "1",
    draining: false,
    successes: 0,
    failedProbes: 0,
    readySince: null,
    failingSince: null,
    drainingSince: null,
    interruptible: false,
    fallback: false,
    replaces: null,
    condemnedAt: null,
    recordClaimedAt: tenMinutesAgo,
    destroyingAt: null,
    destroyEvent: null,
    createdAt: tenMinutesAgo,
    ...fields,
  };
}
