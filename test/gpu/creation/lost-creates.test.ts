import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../src/gpu/creation/launch-plan.js";
import { findTemplate } from "../../../src/gpu/creation/templates.js";
import { startVastRunpodService, type VastRunpodService } from "../../support/markets/vast-and-runpod.js";
import { fitsTemplate } from "../../support/vastai/catalogue.js";
import { marketsApi } from "../marketplace/markets/markets-api.js";
import { rest, waitFor } from "../helpers.js";

// A create whose answer is not a definite one (any 5xx, Cloudflare's 520-524 included, or a
// dropped connection) through the service on both emulators and the real PostgreSQL: the machine
// the market rented is found by its label and the record names it; a market that rented nothing
// is sent the create again (RunPod) or leaves the record creating until the creation grace fails
// it (vast.ai). A record is failed with no machine only when the market has said no; one label
// never ends with two machines.

let service: VastRunpodService;
const { url, record } = marketsApi(() => service);
const RUNPOD_OFFER = "runpod:community-1x-NVIDIA_GeForce_RTX_4090";

beforeAll(async () => {
  service = await startVastRunpodService({ GPU_STATUS_SYNC_MS: "100", VAST_CREATE_LOOKUP_MS: "500", GPU_CREATION_GRACE_MS: "2000" });
});

afterAll(async () => {
  await service?.close();
  expect(service.runpod.breaches).toEqual([]);
});

afterEach(async () => {
  service.runpod.failCreatesAfterRenting(0, 500);
  service.vast.failCreatesAfterRenting(0, 500);
  service.runpod.failCreatesBeforeRenting(0, 500);
  service.vast.failCreatesBeforeRenting(0, 500);
  const live = await service.db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"]).select("instance_id");
  for (const { instance_id } of live) await rest(url(), "DELETE", `/api/gpu/instances/${instance_id}`);
});

/** The cheapest vast.ai ask the budget template can rent, as the service names it. */
function vastOffer(): string {
  const fitting = service.vast.asks.filter((a) => service.vast.isRentable(a.id) && a.verified && fitsTemplate(a, findTemplate("budget")!, LLM_DISK_GB));
  return `vastai:${fitting[0]!.id}`;
}

const create = (offerId: string) => rest<{ instance_id: string; status: string }>(url(), "POST", "/api/gpu/instances", { offer_id: offerId, template_name: "budget" });
const podsOf = (instanceId: string) => [...service.runpod.pods.values()].filter((p) => p.name.endsWith(instanceId));
const vastMachinesOf = (instanceId: string) => [...service.vast.instances.values()].filter((m) => m.label.endsWith(instanceId));
const runpodCreates = () => service.runpod.requests.filter((r) => r.method === "POST" && r.path === "/v2/pods").length;

describe("a RunPod create answered with anything but a definite answer", () => {
  it.each([524, 501, 505, 520, "drop"] as const)("answered %s after the pod was rented: the record names the pod, which is the label's only one", async (answer) => {
    const before = runpodCreates();
    service.runpod.failCreatesAfterRenting(1, answer);
    const res = await create(RUNPOD_OFFER);
    expect(res.status).toBe(200);
    const id = res.body.instance_id;
    const pods = podsOf(id);
    expect(pods).toHaveLength(1);
    expect(await record(id)).toMatchObject({ status: "creating", market: "runpod", market_instance_id: pods[0]!.id });
    expect(runpodCreates() - before).toBe(1);
    await waitFor("running", async () => (["running", "running_llm"].includes((await record(id)).status) ? true : undefined), 10_000);
  });

  it("answered 524 before anything was rented: sent again on the same offer, one pod", async () => {
    const before = runpodCreates();
    service.runpod.failCreatesBeforeRenting(1, 524);
    const res = await create(RUNPOD_OFFER);
    expect(res.status).toBe(200);
    const pods = podsOf(res.body.instance_id);
    expect(pods).toHaveLength(1);
    expect((await record(res.body.instance_id)).market_instance_id).toBe(pods[0]!.id);
    expect(runpodCreates() - before).toBe(2);
  });
});

describe("a RunPod create lost while RunPod lists its pod late", () => {
  it("is sent again after the lookup, and the first pod is destroyed once listed: the label ends with the pod its record names", async () => {
    const before = runpodCreates();
    service.runpod.listLag(5_000);
    service.runpod.failCreatesAfterRenting(1, 524);
    try {
      const res = await create(RUNPOD_OFFER);
      expect(res.status).toBe(200);
      const id = res.body.instance_id;
      expect(runpodCreates() - before).toBe(2);
      const named = (await record(id)).market_instance_id as string;
      const destroyed = await waitFor("the twin destroyed", async () => {
        const logs = await service.db.knex("GpuExecutionLog").where({ instance_id: id, operation: "reconcile_destroy", success: true });
        return logs.length > 0 ? logs : undefined;
      }, 20_000);
      expect(destroyed).toHaveLength(1);
      expect(podsOf(id).map((p) => p.id)).toEqual([named]);
    } finally {
      service.runpod.listLag(0);
    }
  });
});

describe("a vast.ai create answered with anything but a definite answer", () => {
  it.each([524, 501, "drop"] as const)("answered %s after the machine was rented: the record names it", async (answer) => {
    service.vast.failCreatesAfterRenting(1, answer);
    const res = await create(vastOffer());
    expect(res.status).toBe(200);
    const machines = vastMachinesOf(res.body.instance_id);
    expect(machines).toHaveLength(1);
    expect((await record(res.body.instance_id)).market_instance_id).toBe(String(machines[0]!.id));
  });

  it("answered 520 with nothing rented: 503 naming the instance, creating, then failed by the grace, never before", async () => {
    service.vast.failCreatesBeforeRenting(1, 520);
    const res = await create(vastOffer());
    expect(res.status).toBe(503);
    const id = res.body.instance_id;
    expect(await record(id)).toMatchObject({ status: "creating", market_instance_id: null });
    const failed = await waitFor("failed", async () => ((await record(id)).status === "failed" ? record(id) : undefined), 10_000);
    expect(failed.market_instance_id).toBeNull();
    expect(vastMachinesOf(id)).toEqual([]);
  });
});
