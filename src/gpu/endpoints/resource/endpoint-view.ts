import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { EndpointEventSchema, EndpointSchema } from "../../../../gen/gpu/v1/gpu_service_pb.js";
import { roundMoney } from "../../money/cost.js";
import type { EndpointEventRecord } from "./endpoint-events.js";
import type { AutoscaleSettings, EndpointRecord } from "./endpoint-store.js";
import { replicaUrl } from "../replicas/replica-probes.js";
import { billedCost, endpointState, isRoutable, shownState, type ReplicaFacts } from "../replicas/replica-state.js";

// Endpoints and their events as response messages. Absent times stay unset (omitted in REST JSON).

/** The stable URL of an endpoint, on the service's own port. */
export function endpointUrl(name: string): string {
  return `/endpoints/${name}/v1`;
}

export function endpointMessage(endpoint: EndpointRecord, replicas: readonly ReplicaFacts[], totalCost: number): MessageInitShape<typeof EndpointSchema> {
  // A deleting endpoint routes nothing: its replicas are being destroyed, ready or not.
  const routable = endpoint.phase === "active" ? replicas.filter(isRoutable).length : 0;
  // A launch shows once its creation has chosen an offer and written the record; before that
  // (milliseconds, or a budget recheck that finds nothing) there is nothing to show. The kind
  // counts are over the replicas shown, so that they add up to `instances`.
  const shown = replicas.filter((f) => f.record !== null);
  const interruptible = shown.filter(isInterruptible).length;
  return {
    name: endpoint.name,
    templateName: endpoint.templateName,
    replicas: endpoint.replicas,
    maxCostPerHour: endpoint.maxCostPerHour,
    state: endpointState(endpoint, replicas),
    readyReplicas: routable,
    costPerHour: roundMoney(replicas.reduce((sum, f) => sum + billedCost(f), 0)),
    totalCost: roundMoney(totalCost),
    url: endpointUrl(endpoint.name),
    createdAt: timestampFromDate(endpoint.createdAt),
    autoscale: endpoint.autoscale ?? undefined,
    capacity: { ...endpoint.capacity, markets: [...endpoint.capacity.markets] },
    routing: endpoint.routing,
    onDemandReplicas: shown.length - interruptible,
    interruptibleReplicas: interruptible,
    tokenPrice: endpoint.tokenPrice ?? undefined,
    instances: shown.map((f) => ({
      instanceId: f.row.instanceId,
      state: shownState(f),
      url: (f.record && replicaUrl(f.record)) ?? "",
      costPerHour: billedCost(f),
      readySince: f.row.readySince ? timestampFromDate(f.row.readySince) : undefined,
      failedProbes: f.row.failedProbes,
      interruptible: isInterruptible(f),
    })),
  };
}

/** Autoscale settings in an event's words: "0..3, target 4 in flight, up after 30 s, down after 600 s". */
export function autoscaleSummary(a: AutoscaleSettings): string {
  return `${a.minReplicas}..${a.maxReplicas}, target ${a.targetInFlight} in flight, up after ${a.scaleUpAfterS} s, down after ${a.scaleDownAfterS} s`;
}

export function eventMessage(event: EndpointEventRecord): MessageInitShape<typeof EndpointEventSchema> {
  return {
    at: timestampFromDate(event.at),
    kind: event.kind,
    instanceId: event.instanceId ?? undefined,
    detail: event.detail,
    actor: event.actor,
  };
}

/** Rented as a bid: the record says what was rented (a launch for a bid may have fallen back to on-demand). */
function isInterruptible(f: ReplicaFacts): boolean {
  return f.record?.interruptible ?? f.row.interruptible;
}
