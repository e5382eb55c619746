import { describe, expect, it } from "vitest";
import type { ReplicaRow } from "../../../src/gpu/endpoints/resource/replica-store.js";
import { endpointMessage } from "../../../src/gpu/endpoints/resource/endpoint-view.js";
import type { ReplicaFacts } from "../../../src/gpu/endpoints/replicas/replica-state.js";
import type { InstanceRecord } from "../../../src/gpu/store/instance-store.js";
import type { StoredStatus } from "../../../src/gpu/store/status.js";
import { endpointRecord, replicaRow } from "./records.js";

// What GET /api/gpu/endpoints/{name} says of its replicas between two controller rounds: a ready
// replica whose machine has just ended (destroyed, preempted) or that is being replaced is routed
// no more, so it is not shown as ready while `ready_replicas` leaves it out.

const NOW = new Date("2026-12-01T12:00:00Z");
const ago = (ms: number) => new Date(NOW.getTime() - ms);

const ENDPOINT = endpointRecord(NOW, { name: "talk", replicas: 3 });

/** A replica made ready by its probes (unless `row` says otherwise), its machine in `status`. */
function readyReplica(id: string, status: StoredStatus, row: Partial<ReplicaRow> = {}): ReplicaFacts {
  return {
    row: replicaRow(NOW, id, { successes: 5, readySince: ago(300_000), interruptible: true, ...row }),
    record: { instanceId: id, status, marketInstanceId: `m-${id}`, costPerHour: 0.1, interruptible: true, publicIp: "127.0.0.1", portMappings: { "8000/tcp": 40001 } } as Partial<InstanceRecord> as InstanceRecord,
  };
}

describe("an endpoint's view of its replicas", () => {
  it("shows a ready replica whose machine has ended, or that is being replaced, as unhealthy: as ready_replicas counts", () => {
    const view = endpointMessage(
      ENDPOINT,
      [readyReplica("gpu-1", "running_llm"), readyReplica("gpu-2", "destroyed"), readyReplica("gpu-3", "exited"), readyReplica("gpu-4", "running_llm", { condemnedAt: ago(1000) })],
      0,
    );
    expect(view.instances!.map((i) => [i.instanceId, i.state])).toEqual([
      ["gpu-1", "ready"],
      ["gpu-2", "unhealthy"],
      ["gpu-3", "unhealthy"],
      ["gpu-4", "unhealthy"],
    ]);
    expect(view.readyReplicas).toBe(1);
    expect(view.instances!.filter((i) => i.state === "ready")).toHaveLength(view.readyReplicas!);
  });

  it("leaves every other state as the controller reads it", () => {
    const draining = readyReplica("gpu-5", "running_llm", { draining: true, drainingSince: ago(5000) });
    const failing = readyReplica("gpu-6", "running_llm", { failedProbes: 2, failingSince: ago(20_000) });
    const starting = readyReplica("gpu-7", "running", { readySince: null, successes: 0 });
    const view = endpointMessage(ENDPOINT, [draining, failing, starting], 0);
    expect(view.instances!.map((i) => i.state)).toEqual(["draining", "unhealthy", "starting"]);
    expect(view.readyReplicas).toBe(0);
  });
});
