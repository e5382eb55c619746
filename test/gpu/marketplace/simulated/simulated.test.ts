import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConflictError, NotFoundError, OperationFailedError } from "../../../../src/errors.js";
import type { CreateMarketInstanceRequest, MarketInstance, MarketStatus } from "../../../../src/gpu/marketplace/port.js";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../../src/gpu/marketplace/simulated/simulated.js";

const CLOCK = { creatingMs: 60, loadingMs: 60, modelServerStartMs: 60 };
const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";

let market: SimulatedMarketplace;

beforeEach(() => {
  market = createSimulatedMarketplace(CLOCK);
});

afterEach(async () => {
  await market.close();
});

async function firstRentableOfferId(): Promise<string> {
  const offer = (await market.listOffers()).find((o) => o.rentable);
  return offer!.id;
}

function request(offerId: string, extra: Partial<CreateMarketInstanceRequest> = {}): CreateMarketInstanceRequest {
  return { offerId, label: "gpu-1", image: "vllm/vllm-openai:latest", startCommand: "serve", env: {}, ...extra };
}

async function waitFor(id: string, predicate: (i: MarketInstance) => boolean, timeoutMs = 3000): Promise<MarketInstance> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const instance = await market.getInstance(id);
    if (instance && predicate(instance)) return instance;
    if (Date.now() > deadline) throw new Error(`instance ${id} never matched; last ${JSON.stringify(instance)}`);
    await sleep(10);
  }
}

/** A real HTTP request to the model server; null when nothing answers on the port. */
async function probe(port: number, path: string): Promise<{ status: number; body: unknown } | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(1000) });
    return { status: res.status, body: await res.json() };
  } catch {
    return null;
  }
}

async function modelPort(id: string): Promise<number> {
  const running = await waitFor(id, (i) => i.portMappings["8000/tcp"] !== undefined);
  return running.portMappings["8000/tcp"]!;
}

/** The mapped port once the model server really answers its health check. */
async function healthyPort(id: string, timeoutMs = 3000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const port = (await market.getInstance(id))?.portMappings["8000/tcp"];
    if (port !== undefined && (await probe(port, "/health"))?.status === 200) return port;
    if (Date.now() > deadline) throw new Error(`model server of ${id} never answered`);
    await sleep(10);
  }
}

describe("simulated marketplace lifecycle", () => {
  it("moves an instance through creating, loading and running on the configured clock", async () => {
    const created = await market.createInstance(request(await firstRentableOfferId()));
    expect(created.status).toBe("creating");
    expect(created.publicIp).toBe("");
    const seen: MarketStatus[] = [created.status];
    const start = Date.now();
    while (seen.at(-1) !== "running") {
      const status = (await market.getInstance(created.id))!.status;
      if (status !== seen.at(-1)) seen.push(status);
      await sleep(5);
    }
    expect(seen).toEqual(["creating", "loading", "running"]);
    expect(Date.now() - start).toBeGreaterThanOrEqual(CLOCK.creatingMs + CLOCK.loadingMs - 20);
    expect((await market.getInstance(created.id))!.publicIp).toBe("127.0.0.1");
  });

  it("reports the rented offer's GPU and price on the instance", async () => {
    const offer = (await market.listOffers()).find((o) => o.rentable && o.numGpus === 4)!;
    const created = await market.createInstance(request(offer.id));
    expect(created).toMatchObject({
      offerId: offer.id,
      label: "gpu-1",
      gpuName: offer.gpuName,
      numGpus: 4,
      gpuRam: offer.gpuRam,
      dphTotal: offer.dphTotal,
    });
    expect(created.id).toMatch(/^\d+$/);
  });

  it("serves the model over real HTTP once running, and stops serving when the instance exits", async () => {
    const created = await market.createInstance(request(await firstRentableOfferId(), { llmPort: 8000, llmModelName: MODEL }));
    expect(created.portMappings["8000/tcp"]).toBeUndefined();
    const port = await modelPort(created.id);
    expect(await probe(port, "/health")).toEqual({ status: 200, body: { status: "ok" } });
    expect(await probe(port, "/v1/models")).toMatchObject({
      status: 200,
      body: { object: "list", data: [{ id: MODEL, object: "model", owned_by: expect.any(String) }] },
    });
    const completion = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: "POST", body: JSON.stringify({ model: MODEL, prompt: "hi", max_tokens: 4 }) });
    expect(((await completion.json()) as { choices: Array<{ text: string }> }).choices[0]!.text).toBe(`Hello from instance ${created.id},`);

    await market.exitInstance(created.id);
    const exited = (await market.getInstance(created.id))!;
    expect(exited.status).toBe("exited");
    expect(exited.portMappings["8000/tcp"]).toBeUndefined();
    expect(await probe(port, "/health")).toBeNull();
  });

  it("gives its model servers the market's prefill time and prefix-cache budget", async () => {
    const slow = createSimulatedMarketplace({ ...CLOCK, prefillMsPerKtoken: 200, kvCacheTokens: 0 });
    try {
      const offerId = (await slow.listOffers()).find((o) => o.rentable)!.id;
      const created = await slow.createInstance(request(offerId, { llmPort: 8000, llmModelName: MODEL }));
      const deadline = Date.now() + 10_000;
      let port = (await slow.getInstance(created.id))?.portMappings["8000/tcp"];
      while (port === undefined && Date.now() < deadline) {
        await sleep(10);
        port = (await slow.getInstance(created.id))?.portMappings["8000/tcp"];
      }
      // 2,000 prompt tokens at 200 ms a thousand, and no cache to spare the second one.
      const prompt = "word ".repeat(1600);
      for (let i = 0; i < 2; i++) {
        const started = performance.now();
        const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: "POST", body: JSON.stringify({ model: MODEL, prompt, max_tokens: 1 }) });
        expect(res.status).toBe(200);
        expect(performance.now() - started).toBeGreaterThanOrEqual(380);
      }
      expect(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()).toContain(`vllm:prefix_cache_hits_total{engine="0",model_name="${MODEL}"} 0.0`);
    } finally {
      await slow.close();
    }
  });

  it("runs no model server for an instance created without a model", async () => {
    const created = await market.createInstance(request(await firstRentableOfferId(), { llmPort: 8000 }));
    await sleep(CLOCK.creatingMs + CLOCK.loadingMs + CLOCK.modelServerStartMs + 100);
    const running = (await market.getInstance(created.id))!;
    expect(running.status).toBe("running");
    expect(Object.keys(running.portMappings)).toEqual(["22/tcp"]);
  });

  it("stops and starts the model server while the instance keeps running", async () => {
    const created = await market.createInstance(request(await firstRentableOfferId(), { llmPort: 8000, llmModelName: MODEL }));
    const port = await modelPort(created.id);
    await market.stopModelServer(created.id);
    expect((await market.getInstance(created.id))!.status).toBe("running");
    expect(await probe(port, "/health")).toBeNull();

    await market.startModelServer(created.id);
    const again = (await market.getInstance(created.id))!.portMappings["8000/tcp"]!;
    expect(await probe(again, "/health")).toEqual({ status: 200, body: { status: "ok" } });
  });

  it("restarts an exited instance straight to running, its model server following", async () => {
    // A slower model-server start, so the window where the container runs without it is observable.
    await market.close();
    market = createSimulatedMarketplace({ ...CLOCK, modelServerStartMs: 400 });
    const created = await market.createInstance(request(await firstRentableOfferId(), { llmPort: 8000, llmModelName: MODEL }));
    await modelPort(created.id);
    await market.exitInstance(created.id);
    await market.restartInstance(created.id);
    const restarted = (await market.getInstance(created.id))!;
    expect(restarted.status).toBe("running");
    // The container runs at once; the model server needs its start-up delay, as after creation.
    expect(await probe(restarted.portMappings["8000/tcp"]!, "/health")).toBeNull();
    const port = await healthyPort(created.id);
    expect(await probe(port, "/v1/models")).toMatchObject({ status: 200, body: { data: [{ id: MODEL }] } });
  });

  it("refuses to restart an instance that has not stopped", async () => {
    const created = await market.createInstance(request(await firstRentableOfferId()));
    await expect(market.restartInstance(created.id)).rejects.toBeInstanceOf(ConflictError);
  });

  it("takes an instance offline, without an address or a model server", async () => {
    const created = await market.createInstance(request(await firstRentableOfferId(), { llmPort: 8000, llmModelName: MODEL }));
    const port = await modelPort(created.id);
    await market.setOffline(created.id);
    expect(await market.getInstance(created.id)).toMatchObject({ status: "offline", publicIp: "" });
    expect(await probe(port, "/health")).toBeNull();
  });

  it("stops every model server on close", async () => {
    const offers = (await market.listOffers()).filter((o) => o.rentable).slice(0, 2);
    const ids = [];
    for (const offer of offers) ids.push((await market.createInstance(request(offer.id, { llmPort: 8000, llmModelName: MODEL }))).id);
    const ports = await Promise.all(ids.map(modelPort));
    await market.close();
    for (const port of ports) expect(await probe(port, "/health")).toBeNull();
  });

  it("names unknown instances in control errors", async () => {
    await expect(market.exitInstance("404")).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe("simulated marketplace renting", () => {
  it("makes an offer unrentable while rented and rentable again after destroy", async () => {
    const offerId = await firstRentableOfferId();
    const rentable = async () => (await market.listOffers()).find((o) => o.id === offerId)!.rentable;
    const created = await market.createInstance(request(offerId));
    expect(await rentable()).toBe(false);
    await expect(market.createInstance(request(offerId, { label: "gpu-2" }))).rejects.toBeInstanceOf(ConflictError);

    await market.exitInstance(created.id);
    expect(await rentable()).toBe(false);

    await market.destroyInstance(created.id);
    expect(await rentable()).toBe(true);
    expect(await market.getInstance(created.id)).toBeUndefined();
  });

  it("destroys idempotently and stops the model server", async () => {
    const created = await market.createInstance(request(await firstRentableOfferId(), { llmPort: 8000, llmModelName: MODEL }));
    const port = await modelPort(created.id);
    await market.destroyInstance(created.id);
    await market.destroyInstance(created.id);
    await market.destroyInstance("never-existed");
    expect(await probe(port, "/health")).toBeNull();
  });

  it("throws NotFoundError for an unknown offer and ConflictError for an unrentable one", async () => {
    await expect(market.createInstance(request("no-such-offer"))).rejects.toBeInstanceOf(NotFoundError);
    const unrentable = (await market.listOffers()).find((o) => !o.rentable)!;
    await expect(market.createInstance(request(unrentable.id))).rejects.toBeInstanceOf(ConflictError);
  });

  it("fails the next create once when a provisioning failure is injected, leaving the offer rentable", async () => {
    const offerId = await firstRentableOfferId();
    market.failNextCreate();
    await expect(market.createInstance(request(offerId))).rejects.toBeInstanceOf(OperationFailedError);
    expect((await market.listOffers()).find((o) => o.id === offerId)!.rentable).toBe(true);
    expect(await market.listInstances("")).toEqual([]);
    await expect(market.createInstance(request(offerId))).resolves.toMatchObject({ status: "creating" });
  });

  it("lists the instances whose label starts with a prefix", async () => {
    const offers = (await market.listOffers()).filter((o) => o.rentable).slice(0, 3);
    await market.createInstance(request(offers[0]!.id, { label: "gpu-1" }));
    await market.createInstance(request(offers[1]!.id, { label: "gpu-2" }));
    await market.createInstance(request(offers[2]!.id, { label: "other-3" }));
    expect((await market.listInstances("gpu-")).map((i) => i.label).sort()).toEqual(["gpu-1", "gpu-2"]);
    expect(await market.listInstances("none-")).toEqual([]);
  });
});
