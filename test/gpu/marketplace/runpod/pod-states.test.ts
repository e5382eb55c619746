import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { captureLogLines } from "../../../support/log-lines.js";
import { QUICK_MARKET_ENV, startMarketService, type MarketService } from "../../../support/markets/market-service.js";
import { rest, waitFor } from "../../helpers.js";

// What GpuService makes of the states a RunPod pod shows, on the RunPod emulator and the real
// PostgreSQL: a state the adapter does not know keeps that pod's record as stored, is logged once,
// and never fails the listing for the other pods; ERROR makes the record failed and gives the pod
// back; basic status names the market.

let service: MarketService;
const captured = captureLogLines("info");

beforeAll(async () => {
  service = await startMarketService({
    runpod: { apiKey: "rpa_pod_states_0123456789", provisioningMs: 150, startingMs: 150, portLagMs: 150 },
    env: { MARKETPLACE: "runpod", GPU_STATUS_SYNC_MS: "100", ...QUICK_MARKET_ENV },
    logger: captured.logger,
  });
});

afterAll(async () => {
  await service?.close();
  expect(service.runpod!.breaches).toEqual([]);
});

const record = (id: string) => service.db.knex("gpu_instances").where({ instance_id: id }).first();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A pod of the offer, running (no template: no model server to wait for). */
async function runningInstance(offerId: string): Promise<{ id: string; podId: string }> {
  const created = await rest<{ instance_id: string }>(service.server.url, "POST", "/api/gpu/instances", { offer_id: offerId });
  expect(created.status).toBe(200);
  const id = created.body.instance_id;
  await waitFor("running", async () => ((await record(id)).status === "running" ? true : undefined), 15_000);
  return { id, podId: (await record(id)).market_instance_id as string };
}

describe("RunPod pod states", () => {
  it("keeps a pod in a state it does not know at its stored status, logs that state once, and goes on with the others", async () => {
    const strange = await runningInstance("community-1x-NVIDIA_GeForce_RTX_4090");
    const stopped = await runningInstance("secure-1x-NVIDIA_GeForce_RTX_4090");
    service.runpod!.setStatus(strange.podId, "MIGRATING");
    service.runpod!.setStatus(stopped.podId, "EXITED");

    // The other pod's change is seen through the same listing.
    await waitFor("exited", async () => ((await record(stopped.id)).status === "exited" ? true : undefined), 5_000);
    await sleep(500); // several more rounds
    expect((await record(strange.id)).status).toBe("running");
    const said = captured.lines.filter((l) => l.state === "MIGRATING");
    expect(said).toHaveLength(1);
    expect(said[0]!.msg).toMatch(/state this adapter does not know/);
    const basic = await rest<{ data: { status: string; market: string } }>(service.server.url, "GET", `/api/gpu/instances/${strange.id}`);
    expect(basic.status).toBe(200);
    expect(basic.body.data).toMatchObject({ market: "runpod" });
  });

  it("makes the record of a pod in ERROR failed, not destroyed, and deletes the pod", async () => {
    const broken = await runningInstance("secure-1x-NVIDIA_A100-SXM4-80GB");
    const basic = await rest<{ data: { market: string } }>(service.server.url, "GET", `/api/gpu/instances/${broken.id}`);
    expect(basic.body.data.market).toBe("runpod");

    service.runpod!.setStatus(broken.podId, "ERROR");
    await waitFor("pod deleted", async () => (service.runpod!.pods.has(broken.podId) ? undefined : true), 5_000);
    await sleep(500); // the pod is gone from the listing for several rounds now
    const row = await record(broken.id);
    expect(row.status).toBe("failed");
    expect(row.destroyed_at).toBeInstanceOf(Date);
    const deletes = service.runpod!.requests.filter((r) => r.method === "DELETE" && r.path === `/v2/pods/${broken.podId}`);
    expect(deletes.length).toBeGreaterThanOrEqual(1);
  });
});
