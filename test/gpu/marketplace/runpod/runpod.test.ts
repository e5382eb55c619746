import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InvalidInputError, NotFoundError } from "../../../../src/errors.js";
import type { Marketplace } from "../../../../src/gpu/marketplace/port.js";
import type { RunpodMarketplaceOptions } from "../../../../src/gpu/marketplace/runpod/runpod.js";
import { llmRequest, MODEL, MODEL_KEY, runpodOn } from "../../../support/runpod/adapter.js";
import { startRunpodEmulator, type RunpodEmulator } from "../../../support/runpod/emulator.js";
import { waitFor } from "../../../support/wait.js";

const API_KEY = "rpa_test_key_0123456789";

let runpod: RunpodEmulator;
let market: Marketplace;

const connect = (options: Partial<RunpodMarketplaceOptions> = {}) => runpodOn(runpod, API_KEY, options);

beforeEach(async () => {
  runpod = await startRunpodEmulator({ apiKey: API_KEY, provisioningMs: 100, startingMs: 100 });
  market = connect();
});

afterEach(async () => {
  await market.close();
  await runpod.close();
  expect(runpod.breaches).toEqual([]);
});

const catalogueCalls = () => runpod.requests.filter((r) => r.method === "GET" && r.path === "/v2/catalog/gpus");
const creates = () => runpod.requests.filter((r) => r.method === "POST" && r.path === "/v2/pods");

describe("RunPod offers", () => {
  it("are pools, one per GPU type, count and cloud with stock, priced per GPU times the count with the container disk, from the catalogue with availability", async () => {
    const offers = await market.searchOffers({ gpuName: "4090", numGpus: 2, diskGb: 73 });
    expect(catalogueCalls().map((r) => Object.fromEntries(r.query))).toEqual(
      expect.arrayContaining([
        { include: "AVAILABILITY", product: "POD", count: "2", cloud: "SECURE" },
        { include: "AVAILABILITY", product: "POD", count: "2", cloud: "COMMUNITY" },
      ]),
    );
    expect(catalogueCalls()).toHaveLength(2);
    expect(offers).toEqual([
      {
        id: "community-2x-NVIDIA_GeForce_RTX_4090",
        gpuName: "RTX 4090",
        numGpus: 2,
        gpuRam: 24,
        // $0.34 a GPU, and 73 GB of container disk at $0.10 per GB-month of 730 hours.
        dphTotal: 0.69,
        storagePerHour: 0.01,
        rentable: true,
        location: "EU-RO-1",
        directPortCount: 1,
        cudaMaxGood: 12.8,
        pool: true,
      },
      expect.objectContaining({ id: "secure-2x-NVIDIA_GeForce_RTX_4090", dphTotal: 1.39, location: "US-KS-2, EU-RO-1" }),
    ]);
  });

  it("leave out what has no stock, and follow the catalogue's stock as it changes (once the minute's cache is past)", async () => {
    market = connect({ catalogueTtlMs: 0 });
    const h100 = (offers: { id: string }[]) => offers.filter((o) => o.id.includes("H100")).map((o) => o.id);
    expect(h100(await market.searchOffers({ numGpus: 1 }))).toEqual(["community-1x-NVIDIA_H100_80GB_HBM3"]);
    expect(h100(await market.searchOffers({ numGpus: 4 }))).toEqual([]);
    runpod.setStock("NVIDIA H100 80GB HBM3", "SECURE", "HIGH");
    runpod.setStock("NVIDIA H100 80GB HBM3", "COMMUNITY", "NONE");
    expect(h100(await market.searchOffers({ numGpus: 1 }))).toEqual(["secure-1x-NVIDIA_H100_80GB_HBM3"]);
  });

  it("keep the catalogue for a minute: a second search asks nothing", async () => {
    await market.searchOffers({ numGpus: 1 });
    const asked = catalogueCalls().length;
    await market.searchOffers({ numGpus: 1, maxPrice: 1 });
    expect(catalogueCalls()).toHaveLength(asked);
  });

  it("ask only the counts a search needs, with its CUDA floor, and apply the shared filter", async () => {
    const offers = await market.searchOffers({ numGpusIn: [1, 2], minCuda: 12.6, minTotalGpuRam: 48, order: "price" });
    expect(new Set(catalogueCalls().map((r) => r.query.get("count")))).toEqual(new Set(["1", "2"]));
    expect(catalogueCalls().every((r) => r.query.get("minCudaVersion") === "12.6")).toBe(true);
    expect(offers.length).toBeGreaterThan(0);
    for (const offer of offers) {
      expect(offer.numGpus * offer.gpuRam).toBeGreaterThanOrEqual(48);
      expect(offer.cudaMaxGood).toBeGreaterThanOrEqual(12.6);
    }
    expect(offers.map((o) => o.dphTotal)).toEqual([...offers.map((o) => o.dphTotal)].sort((a, b) => a - b));
  });

  it("answer no interruptible offers (RunPod rents none) and ask RunPod nothing for them", async () => {
    expect(market.interruptible).toBe(false);
    expect(await market.searchOffers({ interruptible: true })).toEqual([]);
    await expect(market.createInstance(llmRequest("secure-1x-NVIDIA_GeForce_RTX_4090", "gpu-i1", { bidPerHour: 0.3 }))).rejects.toThrow(InvalidInputError);
    expect(runpod.requests).toHaveLength(0);
  });

  it("find one offer by its id, priced with the disk a search names none of (16 GB), and nothing for an id that is not RunPod's", async () => {
    expect(await market.searchOffers({ offerId: "secure-1x-NVIDIA_A100-SXM4-80GB" })).toEqual([expect.objectContaining({ gpuName: "A100 SXM", dphTotal: 1.492192 })]);
    expect(await market.searchOffers({ offerId: "31000001" })).toEqual([]);
  });

  it("list the whole catalogue over both clouds and the usual counts", async () => {
    const offers = await market.listOffers();
    expect(new Set(offers.map((o) => o.numGpus))).toEqual(new Set([1, 2, 4, 8]));
    expect(new Set(offers.map((o) => o.id.split("-")[0]))).toEqual(new Set(["secure", "community"]));
  });
});

describe("RunPod pods", () => {
  it("are created exactly as the contract says, then go creating -> loading -> running with the model server's public port", async () => {
    runpod = await restartWith({ portLagMs: 300 });
    const created = await market.createInstance(llmRequest("secure-1x-NVIDIA_GeForce_RTX_4090", "gpu-a1"));
    expect(creates()[0]!.body).toEqual({
      name: "gpu-a1",
      image: "vllm/vllm-openai:latest",
      cloud: "SECURE",
      gpu: { id: "NVIDIA GeForce RTX 4090", count: 1, minCudaVersion: "12.1" },
      disk: 100,
      env: { LLM_MODEL_NAME: MODEL, VLLM_API_KEY: MODEL_KEY },
      args: `${MODEL} --host 0.0.0.0 --port 8000`,
      ports: ["8000/tcp"],
    });
    expect(created).toMatchObject({ offerId: "secure-1x-NVIDIA_GeForce_RTX_4090", label: "gpu-a1", status: "creating", gpuName: "RTX 4090", gpuRam: 24, numGpus: 1, dphTotal: 0.703699, interruptible: false });

    const seen = new Set<string>();
    await waitFor(async () => {
      const pod = await market.getInstance(created.id);
      seen.add(pod!.status);
      return pod!.status === "running";
    }, "the pod running", 10_000);
    expect(seen).toContain("loading");
    const running = (await market.getInstance(created.id))!;
    expect(running.publicIp).toBe("127.0.0.1");
    // The model server answers on the mapped port, with the key of its env.
    const answer = await fetch(`http://${running.publicIp}:${running.portMappings["8000/tcp"]}/v1/models`, { headers: { authorization: `Bearer ${MODEL_KEY}` } });
    expect(answer.status).toBe(200);
  });

  it("are listed in one call, only those of the label prefix", async () => {
    await market.createInstance(llmRequest("secure-1x-NVIDIA_GeForce_RTX_4090", "gpu-b1"));
    runpod.addForeignPod("someone-elses");
    const listed = await market.listInstances("gpu-");
    expect(listed.map((p) => p.label)).toEqual(["gpu-b1"]);
    expect(listed[0]).toMatchObject({ gpuName: "RTX 4090", gpuRam: 24 });
    expect(runpod.requests.filter((r) => r.method === "GET" && r.path === "/v2/pods")).toHaveLength(1);
  });

  it("are named as the catalogue names their GPU type by an adapter that has not searched yet (after a restart)", async () => {
    await market.createInstance(llmRequest("community-2x-NVIDIA_GeForce_RTX_4090", "gpu-r1"));
    const restarted = connect();
    const asked = catalogueCalls().length;
    expect(await restarted.listInstances("gpu-")).toEqual([expect.objectContaining({ label: "gpu-r1", gpuName: "RTX 4090", gpuRam: 24, numGpus: 2, offerId: "community-2x-NVIDIA_GeForce_RTX_4090" })]);
    expect(catalogueCalls()).toHaveLength(asked + 1);
    await restarted.close();
  });

  it("report EXITED as exited and ERROR as exited with its failure, and cost as the billed rate", async () => {
    const a = await market.createInstance(llmRequest("secure-1x-NVIDIA_GeForce_RTX_4090", "gpu-c1"));
    const b = await market.createInstance(llmRequest("community-1x-NVIDIA_GeForce_RTX_4090", "gpu-c2"));
    runpod.setStatus(a.id, "EXITED");
    runpod.setStatus(b.id, "ERROR");
    expect(await market.getInstance(a.id)).toMatchObject({ status: "exited", dphTotal: 0 });
    expect(await market.getInstance(b.id)).toMatchObject({ status: "exited", failure: expect.stringContaining("ERROR") });
  });

  it("are deleted with DELETE (204), and a pod RunPod no longer knows is already gone", async () => {
    const created = await market.createInstance(llmRequest("secure-1x-NVIDIA_GeForce_RTX_4090", "gpu-d1"));
    await market.destroyInstance(created.id);
    expect(runpod.pods.has(created.id)).toBe(false);
    expect(await market.getInstance(created.id)).toBeUndefined();
    await market.destroyInstance(created.id);
    expect(runpod.requests.filter((r) => r.method === "DELETE").map((r) => r.status)).toEqual([204, 404]);
    // Never stopped and started again: no pod action is ever asked for.
    expect(runpod.requests.some((r) => r.path.endsWith("/action") || r.method === "PATCH")).toBe(false);
  });

  it("refuse an offer id RunPod does not have, before any create", async () => {
    await expect(market.createInstance(llmRequest("secure-1x-NVIDIA_Imaginary_9000", "gpu-e1"))).rejects.toThrow(NotFoundError);
    await expect(market.createInstance(llmRequest("31000001", "gpu-e2"))).rejects.toThrow(NotFoundError);
    await expect(market.createInstance(llmRequest("community-2x-NVIDIA_A100-SXM4-80GB", "gpu-e3"))).rejects.toThrow(NotFoundError);
    expect(creates()).toHaveLength(0);
  });
});

async function restartWith(options: { portLagMs?: number }): Promise<RunpodEmulator> {
  await market.close();
  await runpod.close();
  const next = await startRunpodEmulator({ apiKey: API_KEY, provisioningMs: 100, startingMs: 100, ...options });
  runpod = next;
  market = connect();
  return next;
}
