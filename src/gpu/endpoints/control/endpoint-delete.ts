import { ACTOR_SYSTEM } from "../../../actor.js";
import { destroyRecord } from "../../lifecycle/destroy.js";
import { isTerminal } from "../../store/status.js";
import type { EndpointRecord } from "../resource/endpoint-store.js";
import { replicaFactsOf } from "../replicas/replica-facts.js";
import { note, type RoundDeps } from "./control-round.js";

// Deleting an endpoint (SPEC.md section 2, DELETE is idempotent): every machine destroyed, then
// the endpoint is deleted. A round that cannot finish it (a creation still under way, a destroy
// the marketplace did not confirm) leaves it `deleting` for the next round.

export async function finishDelete(deps: RoundDeps, endpoint: EndpointRecord): Promise<void> {
  const { ctx, endpoints, settings } = deps;
  const facts = await replicaFactsOf(deps, endpoint);
  let pending = 0;
  const now = Date.now();
  for (const { row, record } of facts) {
    // A creation still under way (here, or on a leader that just lost its lock) is waited for:
    // destroying only once it has a machine or has failed leaves no machine behind.
    const launching = record === null ? now - row.createdAt.getTime() < settings.missingGraceMs : record.status === "creating" && record.marketInstanceId === null;
    if (launching || (record === null && !(await endpoints.replicas.removeUnclaimed(row.instanceId)))) {
      pending++;
      continue;
    }
    try {
      if (!(await deps.confirmLead())) return;
      if (record && !isTerminal(record.status)) await destroyRecord(ctx, ACTOR_SYSTEM, record, "destroy_instance");
      await endpoints.replicas.remove(row.instanceId);
    } catch (err) {
      pending++;
      ctx.logger.warn({ err, endpoint: endpoint.name, instance_id: row.instanceId }, "endpoint machine not destroyed yet; retrying next round");
    }
  }
  if (pending === 0 && (await endpoints.markDeleted(endpoint.id))) {
    await note(deps, endpoint, "deleted", `deleted: ${facts.length} machine(s) destroyed`);
  }
}
