import { findTemplate } from "../../creation/templates.js";
import { modelServerUrl } from "../../lifecycle/probe.js";
import type { GpuContext } from "../../gpu-context.js";
import { syncRecord } from "../../lifecycle/status-sync.js";
import { machineRefOf, type InstanceRecord } from "../../store/instance-store.js";
import { isTerminal } from "../../store/status.js";
import type { EndpointEventStore } from "../resource/endpoint-events.js";
import type { EndpointRecord, EndpointStore } from "../resource/endpoint-store.js";
import type { ReplicaProbeFields } from "../resource/replica-store.js";
import type { ReadinessProbe } from "./readiness-probe.js";
import type { ReplicaFacts } from "./replica-state.js";

// Readiness from real probes (SPEC.md section 2, "Readiness"): a replica becomes ready after
// readyAfter consecutive successes; a ready one leaves routing at its first failed probe
// (not_ready) and comes back at the next success (ready). How long it has been failing is kept
// (failing_since) for the plan's unhealthy rule. Transient host states need no rule of their own:
// a rebooting machine fails its probes and is judged by the same clock.

/** Where a replica's model server answers, from its record; undefined while it has no address. */
export function replicaUrl(record: InstanceRecord): string | undefined {
  return modelServerUrl({ publicIp: record.publicIp ?? "", portMappings: record.portMappings });
}

/** The key the replica's model server demands; null for a server started before keys. */
export function replicaKey(record: InstanceRecord): string | null {
  return record.modelApiKey;
}

export interface ProbeDeps {
  ctx: GpuContext;
  endpoints: EndpointStore;
  events: EndpointEventStore;
  probe: ReadinessProbe;
  settings: { readyAfter: number };
}

export async function probeReplicas(
  deps: ProbeDeps,
  endpoint: EndpointRecord,
  replicas: readonly ReplicaFacts[],
): Promise<void> {
  const model = findTemplate(endpoint.templateName)?.config?.llmModelName ?? "";
  await Promise.all(
    replicas.map(async ({ row, record }) => {
      if (!record || record.marketInstanceId === null || isTerminal(record.status) || record.status === "exited") return;
      if (row.draining || row.condemnedAt !== null || row.destroyingAt !== null) return;
      const url = replicaUrl(record);
      // A replica never ready without an address is still provisioning: nothing to count yet.
      if (url === undefined && row.readySince === null) return;
      const ok = url !== undefined && (await deps.probe(url, model, replicaKey(record)));
      // A ready interruptible machine that stops answering may have been outbid: ask the
      // marketplace now, not at the next sync, so that a preemption is seen within one probe
      // interval. One still loading its model fails every probe for minutes: it waits for the
      // status sync, as reads are rate-limited and shared with the creates.
      if (!ok && record.interruptible && row.readySince !== null) await readPreemption(deps.ctx, record);
      const { fields, event } = probeOutcome(row, ok, deps.settings.readyAfter, new Date());
      await deps.endpoints.replicas.updateProbe(row.instanceId, fields);
      if (event) {
        await deps.events.append({ endpointId: endpoint.id, kind: event.kind, instanceId: row.instanceId, detail: `${row.instanceId} ${event.detail}` });
        // Only a newly launched replica's readiness ends the launch backoff; one back in routing
        // after a blip says nothing about launches.
        const newlyReady = event.kind === "ready" && row.readySince === null;
        if (newlyReady && (!endpoint.everReady || endpoint.launchFailures > 0)) {
          await deps.endpoints.setControl(endpoint.id, { everReady: true, launchFailures: 0, nextLaunchAt: null });
        }
      }
    }),
  );
}

/** The row's probe fields after one probe, and the event it makes, if any. Pure. */
export function probeOutcome(
  row: Pick<ReplicaFacts["row"], "successes" | "failedProbes" | "readySince" | "failingSince">,
  ok: boolean,
  readyAfter: number,
  now: Date,
): { fields: ReplicaProbeFields; event?: { kind: "ready" | "not_ready"; detail: string } } {
  if (ok) {
    const successes = row.successes + 1;
    const fields: ReplicaProbeFields = { successes, failedProbes: 0, failingSince: null };
    if (row.readySince === null && successes >= readyAfter) {
      return { fields: { ...fields, readySince: now }, event: { kind: "ready", detail: `is ready (${successes} probes answered)` } };
    }
    if (row.readySince !== null && row.failedProbes > 0) {
      return { fields: { ...fields, readySince: now }, event: { kind: "ready", detail: `is back in routing after ${row.failedProbes} failed probe(s)` } };
    }
    return { fields };
  }
  const fields: ReplicaProbeFields = { successes: 0, failedProbes: row.failedProbes + 1, failingSince: row.failingSince ?? now };
  if (row.readySince !== null && row.failedProbes === 0) {
    return { fields, event: { kind: "not_ready", detail: "left routing: its model server failed a probe" } };
  }
  return { fields };
}

/** A fresh status read of an interruptible replica's machine; a preemption is stored at once (status sync). */
async function readPreemption(ctx: GpuContext, record: InstanceRecord): Promise<void> {
  try {
    const market = await ctx.marketplace.getInstance(machineRefOf(record)!, undefined, { fresh: true });
    if (market?.status === "preempted") await syncRecord(ctx, record, market);
  } catch (err) {
    ctx.logger.warn({ err, instance_id: record.instanceId }, "status read after a failed probe failed; the sync loop reads it next");
  }
}
