import type { GpuContext } from "../../gpu-context.js";
import type { EndpointRecord, EndpointStore } from "../resource/endpoint-store.js";
import type { ReplicaFacts } from "./replica-state.js";

/** An endpoint's replicas not removed, each with its instance record (null until written). */
export async function replicaFactsOf(
  deps: { ctx: Pick<GpuContext, "instances">; endpoints: EndpointStore },
  endpoint: Pick<EndpointRecord, "id">,
): Promise<ReplicaFacts[]> {
  const rows = await deps.endpoints.replicas.listOf(endpoint.id);
  const records = new Map((await deps.ctx.instances.getMany(rows.map((r) => r.instanceId))).map((r) => [r.instanceId, r]));
  return rows.map((row) => ({ row, record: records.get(row.instanceId) ?? null }));
}
