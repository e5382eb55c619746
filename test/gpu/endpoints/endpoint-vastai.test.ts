import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, waitForEndpoint, type EndpointJson } from "./helpers.js";

// Replicas on the vast.ai emulator (vast.ai's wire format, its model servers on loopback): a
// model server that dies while its machine runs is replaced; a host that reboots for less than
// the unhealthy limit keeps its replica.

let svc: VastService;

beforeAll(async () => {
  svc = await startVastService(
    { apiKey: "vast-endpoints-0123456789", provisioningMs: 100, loadingMs: 100 },
    { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "100" },
  );
});

afterAll(async () => {
  await svc?.close();
});

const readyOf = (e: EndpointJson) => (e.instances ?? []).filter((i) => i.state === "ready").map((i) => i.instance_id);
const machineOf = async (instanceId: string) => Number((await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()).market_instance_id);

describe("endpoints on vast.ai", () => {
  it("replaces a replica whose model server dies while its machine keeps running", async () => {
    await createEndpoint(svc.server.url, { name: "vast-model-dies", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "vast-model-dies", "ready", (e) => e.state === "ready");
    const [victim] = readyOf(ready) as [string];
    const machine = svc.vast.instances.get(await machineOf(victim))!;
    // The container runs on (actual_status "running", its port still mapped) but nothing answers.
    await machine.server!.close();
    const healed = await waitForEndpoint(svc.server.url, "vast-model-dies", "replaced", (e) => e.state === "ready" && e.instances?.length === 1 && !readyOf(e).includes(victim));
    const replacement = readyOf(healed)[0]!;
    const events = await eventsOf(svc.server.url, "vast-model-dies");
    expect(events.filter((e) => e.instance_id === victim).map((e) => e.kind)).toEqual(["launched", "ready", "not_ready", "unhealthy", "replaced"]);
    expect(events.filter((e) => e.instance_id === replacement).map((e) => e.kind)).toEqual(["launched", "ready"]);
    expect(svc.vast.instances.has(machine.id)).toBe(false);
    await deleteAndWait(svc.server.url, "vast-model-dies", svc.db.knex);
  });

  it("keeps a replica whose host reboots for less than the unhealthy limit", async () => {
    await createEndpoint(svc.server.url, { name: "vast-reboot", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "vast-reboot", "ready", (e) => e.state === "ready");
    const [replica] = readyOf(ready) as [string];
    const machineId = await machineOf(replica);
    svc.vast.setStatus(machineId, "rebooting");
    await waitForEndpoint(svc.server.url, "vast-reboot", "out of routing", (e) => e.instances?.[0]?.state === "unhealthy");
    svc.vast.setStatus(machineId, "running");
    const back = await waitForEndpoint(svc.server.url, "vast-reboot", "back in routing", (e) => e.state === "ready");
    expect(readyOf(back)).toEqual([replica]);
    const kinds = (await eventsOf(svc.server.url, "vast-reboot")).map((e) => e.kind);
    expect(kinds).not.toContain("unhealthy");
    expect(kinds).not.toContain("replaced");
    await deleteAndWait(svc.server.url, "vast-reboot", svc.db.knex);
  });
});
