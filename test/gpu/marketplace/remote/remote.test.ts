import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConflictError, NotFoundError, OperationFailedError, UnavailableError } from "../../../../src/errors.js";
import type { CreateMarketInstanceRequest, Marketplace } from "../../../../src/gpu/marketplace/port.js";
import { createRemoteMarketplace, type RemoteMarketplaceOptions } from "../../../../src/gpu/marketplace/remote/remote.js";
import { startContractServer, type ContractServer } from "./contract-server.js";

const API_KEY = "test-key-0123456789";
const MODEL = "Qwen/Qwen2.5-Coder-14B-Instruct";

let contract: ContractServer;
let remote: Marketplace;

function connect(options: Partial<RemoteMarketplaceOptions> = {}): Marketplace {
  return createRemoteMarketplace({ baseUrl: contract.url, apiKey: API_KEY, timeoutMs: 2000, retries: 3, backoffMs: 10, ...options });
}

beforeEach(async () => {
  contract = await startContractServer({ apiKey: API_KEY });
  remote = connect();
});

afterEach(async () => {
  await remote.close();
  await contract.close();
});

async function rentableOfferId(index = 0): Promise<string> {
  return (await contract.backend.listOffers()).filter((o) => o.rentable)[index]!.id;
}

function request(offerId: string, label: string, extra: Partial<CreateMarketInstanceRequest> = {}): CreateMarketInstanceRequest {
  return { offerId, label, image: "vllm/vllm-openai:latest", startCommand: "serve", env: { A: "1" }, ...extra };
}

describe("remote marketplace against the contract server", () => {
  it("lists the whole catalogue with every offer field", async () => {
    expect(await remote.listOffers()).toEqual(await contract.backend.listOffers());
  });

  it("creates, gets, lists by label prefix and destroys an instance", async () => {
    const offerId = await rentableOfferId();
    const created = await remote.createInstance(request(offerId, "gpu-7"));
    expect(created).toMatchObject({ offerId, label: "gpu-7", status: "creating" });
    expect((await remote.listOffers()).find((o) => o.id === offerId)!.rentable).toBe(false);

    // The backend's instance moves on with time: compare with a view that did not change around the read.
    for (let attempt = 1; ; attempt++) {
      const before = await contract.backend.getInstance(created.id);
      const seen = await remote.getInstance(created.id);
      const after = await contract.backend.getInstance(created.id);
      if (JSON.stringify(before) !== JSON.stringify(after) && attempt < 5) continue;
      // The contract does not carry the simulated machine's id.
      expect(seen).toEqual({ ...after, machineId: undefined });
      break;
    }
    await remote.createInstance(request(await rentableOfferId(), "other-1"));
    expect((await remote.listInstances("gpu-")).map((i) => i.id)).toEqual([created.id]);

    await remote.destroyInstance(created.id);
    expect(await remote.getInstance(created.id)).toBeUndefined();
    expect(await contract.backend.getInstance(created.id)).toBeUndefined();
    expect((await remote.listOffers()).find((o) => o.id === offerId)!.rentable).toBe(true);
    await expect(remote.destroyInstance(created.id)).resolves.toBeUndefined();
  });

  it("sends the label as the idempotency key of a create", async () => {
    await remote.createInstance(request(await rentableOfferId(), "gpu-8"));
    const post = contract.requests.find((r) => r.method === "POST")!;
    expect(post.idempotencyKey).toBe("gpu-8");
  });

  it("carries the model server's port mapping to a probe that answers over the network", async () => {
    const created = await remote.createInstance(request(await rentableOfferId(), "gpu-9", { llmPort: 8000, llmModelName: MODEL }));
    let port: number | undefined;
    for (let i = 0; i < 200 && port === undefined; i++) {
      port = (await remote.getInstance(created.id))!.portMappings["8000/tcp"];
      if (port === undefined) await sleep(10);
    }
    const res = await fetch(`http://127.0.0.1:${port}/v1/models`);
    expect(await res.json()).toMatchObject({ data: [{ id: MODEL }] });
  });

  it("maps an unknown offer to NotFoundError and a rented one to ConflictError", async () => {
    await expect(remote.createInstance(request("no-such-offer", "gpu-1"))).rejects.toBeInstanceOf(NotFoundError);
    const offerId = await rentableOfferId();
    await remote.createInstance(request(offerId, "gpu-2"));
    await expect(remote.createInstance(request(offerId, "gpu-3"))).rejects.toThrow(ConflictError);
  });

  it("refuses a label already used for another offer instead of renting a second machine", async () => {
    await remote.createInstance(request(await rentableOfferId(0), "gpu-6"));
    await expect(remote.createInstance(request(await rentableOfferId(1), "gpu-6"))).rejects.toThrow(/already used label 'gpu-6'/);
    expect(await contract.backend.listInstances("gpu-6")).toHaveLength(1);
  });

  it("does not take a 404 from a wrong base URL for a destroyed instance", async () => {
    const created = await remote.createInstance(request(await rentableOfferId(), "gpu-5"));
    const misdirected = connect({ baseUrl: `${contract.url}/not-the-api/` });
    await expect(misdirected.destroyInstance(created.id)).rejects.toThrow(/MARKETPLACE_URL/);
    await expect(misdirected.getInstance(created.id)).rejects.toBeInstanceOf(OperationFailedError);
    expect(await contract.backend.getInstance(created.id)).toBeDefined();
  });
});

describe("remote marketplace retries", () => {
  it("retries a 429 and then succeeds", async () => {
    contract.throttle(2);
    const offers = await remote.listOffers();
    expect(offers.length).toBeGreaterThan(0);
    expect(contract.requests.filter((r) => r.path === "/v1/offers")).toHaveLength(3);
  });

  it("waits as long as Retry-After asks before retrying", async () => {
    contract.throttle(1, "1");
    await remote.listOffers();
    const [first, second] = contract.requests;
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(950);
  });

  it("does not wait for a Retry-After beyond its limit: unavailable at once", async () => {
    contract.throttle(1, "3600");
    await expect(remote.listOffers()).rejects.toThrow(/retry after 3600 s/);
    expect(contract.requests).toHaveLength(1);
  });

  it("retries 5xx answers and gives up as unavailable after the configured retries", async () => {
    contract.failNext(2, 502);
    await expect(remote.getInstance("1")).resolves.toBeUndefined();
    contract.failNext(10, 503);
    const failing = connect({ retries: 2 });
    const before = contract.requests.length;
    await expect(failing.listOffers()).rejects.toBeInstanceOf(UnavailableError);
    expect(contract.requests.length - before).toBe(3);
  });

  it("turns an answer that never comes into UnavailableError after the per-attempt timeout", async () => {
    contract.hang(10);
    const slow = connect({ timeoutMs: 150, retries: 1 });
    const start = Date.now();
    const failure = slow.listOffers();
    await expect(failure).rejects.toBeInstanceOf(UnavailableError);
    await expect(failure).rejects.toThrow(/no answer within 150 ms \(2 attempts\)/);
    expect(Date.now() - start).toBeGreaterThanOrEqual(300);
    expect(Date.now() - start).toBeLessThan(3000);
  });

  it("turns an unreachable marketplace into UnavailableError", async () => {
    const url = contract.url;
    await contract.close();
    const gone = createRemoteMarketplace({ baseUrl: url, apiKey: API_KEY, timeoutMs: 500, retries: 1, backoffMs: 10 });
    await expect(gone.listInstances("gpu-")).rejects.toThrow(/unreachable/);
    contract = await startContractServer({ apiKey: API_KEY });
  });

  it("repeats a create whose answer was lost and gets back the same machine, not a second one", async () => {
    contract.loseAnswers(1);
    const created = await remote.createInstance(request(await rentableOfferId(), "gpu-42"));
    const posts = contract.requests.filter((r) => r.method === "POST");
    expect(posts.map((r) => r.idempotencyKey)).toEqual(["gpu-42", "gpu-42"]);
    expect((await contract.backend.listInstances("gpu-")).map((i) => i.id)).toEqual([created.id]);
  });

  it("stops at once when the caller aborts", async () => {
    contract.hang(10);
    const controller = new AbortController();
    const call = remote.listOffers(controller.signal);
    setTimeout(() => controller.abort(new Error("caller gave up")), 50);
    await expect(call).rejects.toThrow("caller gave up");
    expect(contract.requests).toHaveLength(1);
  });
});

describe("remote marketplace API key", () => {
  it("says a wrong key was refused, without retrying and without echoing the key", async () => {
    const wrongKey = "wrong-key-secret-value";
    const wrong = connect({ apiKey: wrongKey });
    const failure = wrong.listOffers();
    await expect(failure).rejects.toBeInstanceOf(OperationFailedError);
    const error = (await failure.catch((e: unknown) => e)) as OperationFailedError;
    expect(error.message).toMatch(/refused the API key/);
    expect(JSON.stringify({ message: error.message, extra: error.extra })).not.toContain(wrongKey);
    expect(contract.requests).toHaveLength(1);
  });
});
