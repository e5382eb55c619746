import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConflictError, InvalidInputError, NotFoundError, OperationFailedError, OutcomeUnknownError, UnavailableError } from "../../../../src/errors.js";
import type { CreateMarketInstanceRequest, Marketplace } from "../../../../src/gpu/marketplace/port.js";
import type { VastMarketplaceOptions } from "../../../../src/gpu/marketplace/vastai/vastai.js";
import { adapterOn } from "../../../support/vastai/adapter.js";
import { thresholdMsOf, VAST_INTERVALS_MS } from "../../../../src/gpu/marketplace/vastai/vastai-http.js";
import { dphTotal, storagePerHour } from "../../../support/vastai/catalogue.js";
import { startVastEmulator, type VastEmulator } from "../../../support/vastai/emulator.js";
import { waitFor } from "../../../support/wait.js";
import { minMegabytes } from "../../../../src/gpu/marketplace/vastai/vastai-wire.js";

const API_KEY = "vast-test-key-0123456789";
const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";

let vast: VastEmulator;
let market: Marketplace;

function connect(options: Partial<VastMarketplaceOptions> = {}): Marketplace {
  return adapterOn(vast, API_KEY, options);
}

beforeEach(async () => {
  vast = await startVastEmulator({ apiKey: API_KEY, provisioningMs: 150, loadingMs: 150 });
  market = connect();
});

afterEach(async () => {
  await market.close();
  await vast.close();
});

function llmRequest(offerId: string, label: string, extra: Partial<CreateMarketInstanceRequest> = {}): CreateMarketInstanceRequest {
  return {
    offerId,
    label,
    image: "vllm/vllm-openai:latest",
    diskGb: 100,
    startCommand: `vllm serve ${MODEL} --host 0.0.0.0 --port 8000`,
    env: { LLM_MODEL_NAME: MODEL },
    llmPort: 8000,
    llmModelName: MODEL,
    ...extra,
  };
}

/** Polls until read answers something. */
async function eventually<T>(read: () => Promise<T | undefined>, what: string): Promise<T> {
  let value: T | undefined;
  await waitFor(async () => (value = await read()) !== undefined, what, 5000);
  return value!;
}

const rentableAsk = (gpu = "RTX 3090") => vast.asks.find((a) => a.gpu_name === gpu && a.rentable && a.verified && vast.isRentable(a.id))!;
const calls = (method: string, path: RegExp) => vast.requests.filter((r) => r.method === method && path.test(r.path));

describe("vast.ai offers", () => {
  it("pushes every filter to POST /api/v0/bundles/ in vast.ai's units and converts the answer", async () => {
    const offers = await market.searchOffers({ gpuName: "rtx_4090", maxPrice: 1.5, minGpuRam: 24, numGpus: 2, rentable: true, order: "price", limit: 3, diskGb: 60 });
    const [search] = calls("POST", /^\/api\/v0\/bundles\/$/);
    expect(search!.body).toMatchObject({
      gpu_name: { in: ["RTX 4090"] },
      dph_total: { lte: 1.5 },
      gpu_ram: { gte: minMegabytes(24) },
      num_gpus: { eq: 2 },
      rentable: { eq: true },
      verified: { eq: true },
      external: { eq: false },
      reliability2: { gte: 0.95 },
      disk_space: { gte: 60 },
      type: "on-demand",
      order: [["dph_total", "asc"]],
      limit: 3,
      allocated_storage: 60,
    });
    expect(offers.length).toBeGreaterThan(0);
    for (const offer of offers) {
      const ask = vast.asks.find((a) => String(a.id) === offer.id)!;
      expect(offer).toEqual({
        id: String(ask.id),
        gpuName: "RTX 4090",
        numGpus: 2,
        gpuRam: 24, // 24564 MB as the host reports it
        dphTotal: dphTotal(ask, 60),
        rentable: true,
        location: ask.geolocation,
        directPortCount: ask.direct_port_count,
        cudaMaxGood: ask.cuda_max_good,
        reliability: ask.reliability2,
        diskSpaceGb: ask.disk_space,
        storagePerHour: storagePerHour(ask, 60),
        machineId: String(ask.machine_id),
      });
      expect(ask.reliability2).toBeGreaterThanOrEqual(0.95);
      expect(ask.external).toBe(false);
    }
    expect(offers.map((o) => o.dphTotal)).toEqual([...offers.map((o) => o.dphTotal)].sort((a, b) => a - b));
  });

  it("prices offers with the disk the create will ask for, so the cap holds for the rented price", async () => {
    const ask = rentableAsk("Tesla T4");
    const small = dphTotal(ask, 8);
    const big = dphTotal(ask, 500);
    expect(big).toBeGreaterThan(small);
    const cap = (small + big) / 2;
    const ids = async (diskGb: number) => (await market.searchOffers({ maxPrice: cap, rentable: true, diskGb, limit: 1000 })).map((o) => o.id);
    expect(await ids(8)).toContain(String(ask.id));
    expect(await ids(500)).not.toContain(String(ask.id));
  });

  it("looks a named offer up whether rentable or not; an id that is not vast.ai's names nothing", async () => {
    const taken = vast.asks.find((a) => !a.rentable)!;
    expect(await market.searchOffers({ offerId: String(taken.id) })).toMatchObject([{ id: String(taken.id), rentable: false }]);
    const before = vast.requests.length;
    expect(await market.searchOffers({ offerId: "sim-1" })).toEqual([]);
    expect(vast.requests.length).toBe(before);
  });

  it("matches GPU names as the port does: a substring, ignoring case, spaces, _ and -", async () => {
    const names = new Set((await market.searchOffers({ gpuName: "a100", limit: 1000 })).map((o) => o.gpuName));
    expect([...names]).toEqual(["A100 SXM4"]);
  });
});

describe("vast.ai instances", () => {
  it("rents an ask with the image, disk, port 8000, start command and label, and follows its status to running", async () => {
    const ask = rentableAsk();
    const created = await market.createInstance(llmRequest(String(ask.id), "gpu-1001"));
    const [put] = calls("PUT", /^\/api\/v0\/asks\/\d+\/$/);
    expect(put!.path).toBe(`/api/v0/asks/${ask.id}/`);
    expect(put!.body).toMatchObject({
      client_id: "me",
      image: "vllm/vllm-openai:latest",
      disk: 100,
      label: "gpu-1001",
      env: { LLM_MODEL_NAME: MODEL, "-p 8000:8000": "1" },
      runtype: "args",
      onstart: "/bin/sh",
      args: ["-c", `vllm serve ${MODEL} --host 0.0.0.0 --port 8000`],
    });
    expect(created).toMatchObject({ offerId: String(ask.id), label: "gpu-1001", status: "creating", gpuName: "RTX 3090", gpuRam: 24, dphTotal: dphTotal(ask, 100) });
    expect(vast.isRentable(ask.id)).toBe(false);

    await waitFor(async () => (await market.getInstance(created.id))?.status === "loading", "loading", 5000);
    const running = await eventually(async () => {
      const seen = await market.getInstance(created.id);
      return seen?.portMappings["8000/tcp"] ? seen : undefined;
    }, "port 8000 mapped");
    expect(running).toMatchObject({ status: "running", publicIp: "127.0.0.1", label: "gpu-1001" });
    // SSH on the public address goes to the port mapped to 22, not to vast.ai's proxy port (ssh_host:ssh_port).
    const row = vast.instances.get(Number(created.id))!;
    const shown = (await (await fetch(`${vast.url}/api/v0/instances/${row.id}/?owner=me`, { headers: { authorization: `Bearer ${API_KEY}` } })).json()) as {
      instances: { ports: Record<string, Array<{ HostPort: string }>>; ssh_port: number };
    };
    expect(running.sshPort).toBe(Number(shown.instances.ports["22/tcp"]![0]!.HostPort));
    expect(running.sshPort).not.toBe(shown.instances.ssh_port);
    const health = await fetch(`http://${running.publicIp}:${running.portMappings["8000/tcp"]}/health`);
    expect(health.status).toBe(200);
    // Its model server answers completions as a vLLM container does, naming the machine.
    const completion = await fetch(`http://${running.publicIp}:${running.portMappings["8000/tcp"]}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
    });
    expect(((await completion.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe(`Hello from instance ${created.id},`);
    expect(calls("GET", /^\/api\/v0\/instances\/\d+\/$/).every((r) => r.query.get("owner") === "me")).toBe(true);
  });

  it("maps stopped, unloaded, rebooting, frozen, offline, unknown and a failed start", async () => {
    const a = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-1"));
    const states = [
      ["exited", "exited"],
      ["unloaded", "exited"],
      ["rebooting", "loading"],
      ["frozen", "offline"],
      ["offline", "offline"],
      ["unknown", "offline"],
      ["running", "running"],
    ] as const;
    for (const [actual, expected] of states) {
      vast.setStatus(Number(a.id), actual);
      expect((await market.getInstance(a.id))!.status).toBe(expected);
    }
    vast.failNextStart();
    const b = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-2"));
    const failed = await eventually(async () => {
      const seen = await market.getInstance(b.id);
      return seen?.failure ? seen : undefined;
    }, "the failed start");
    expect(failed.status).toBe("exited");
    expect(failed.failure).toMatch(/OCI runtime create failed/);
  });

  it("answers undefined for an instance vast.ai does not have", async () => {
    expect(await market.getInstance("99999999")).toBeUndefined();
    expect(await market.getInstance("not-a-vast-id")).toBeUndefined();
  });

  it("lists every instance through GET /api/v1/instances/, following next_token, keeping the label prefix", async () => {
    for (let i = 0; i < 30; i++) vast.addForeignInstance(i % 3 === 0 ? `someone-${i}` : `gpu-${i}`);
    const listed = await market.listInstances("gpu-");
    expect(listed).toHaveLength(20);
    expect(listed.every((i) => i.label.startsWith("gpu-"))).toBe(true);
    const pages = calls("GET", /^\/api\/v1\/instances\/$/);
    expect(pages).toHaveLength(2);
    expect(pages[1]!.query.get("after_token")).toBeTruthy();
    expect(calls("GET", /^\/api\/v0\/instances\/$/)).toHaveLength(0);
  });

  it("destroys with DELETE, frees the ask, and takes an instance already gone as destroyed", async () => {
    const ask = rentableAsk();
    const created = await market.createInstance(llmRequest(String(ask.id), "gpu-5"));
    await market.destroyInstance(created.id);
    expect(vast.instances.has(Number(created.id))).toBe(false);
    expect(vast.isRentable(ask.id)).toBe(true);
    await expect(market.destroyInstance(created.id)).resolves.toBeUndefined();
    expect(calls("DELETE", /^\/api\/v0\/instances\/\d+\/$/)).toHaveLength(2);
  });

  it("does not read a 404 without vast.ai's error body (a wrong VAST_API_URL) as gone", async () => {
    const wrong = connect({ baseUrl: `${vast.url}/wrong-prefix` });
    await expect(wrong.destroyInstance("31000001")).rejects.toThrow(OperationFailedError);
  });
});

describe("vast.ai create errors", () => {
  it("maps an unknown ask to NotFoundError, one a search showed and vast.ai answers 404 to (taken) to ConflictError, invalid arguments to InvalidInputError", async () => {
    await expect(market.createInstance(llmRequest("4299999", "gpu-1"))).rejects.toThrow(NotFoundError);
    await expect(market.createInstance(llmRequest("sim-1", "gpu-1"))).rejects.toThrow(NotFoundError);
    const ask = rentableAsk();
    expect(await market.searchOffers({ offerId: String(ask.id) })).toHaveLength(1);
    await market.createInstance(llmRequest(String(ask.id), "gpu-2"));
    const taken = await market.createInstance(llmRequest(String(ask.id), "gpu-3")).catch((e: unknown) => e);
    // vast.ai answers 404 "not available" for a taken ask, as for one that never existed.
    expect(vast.requests.at(-1)).toMatchObject({ method: "PUT" });
    expect(taken).toBeInstanceOf(ConflictError);
    expect((taken as ConflictError).extra).toMatchObject({ field: "offer_id" });
    expect((taken as Error).message).toMatch(/rented meanwhile/);
    const invalid = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-4", { diskGb: 4 })).catch((e: unknown) => e);
    expect(invalid).toBeInstanceOf(InvalidInputError);
    expect((invalid as Error).message).toMatch(/disk/);
    expect(vast.instances.size).toBe(1);
  });

  it.each([
    ["not-your-own", 403, /does not let this account rent it: error 403\/3586/],
    ["gone", 410, /no_such_ask Instance type \d+ is no longer available/],
    ["invalid-price", 400, /price for it changed since the search/],
  ] as const)("maps a create refused as %s (HTTP %i) to ConflictError on offer_id, renting nothing", async (why, status, message) => {
    vast.refuseNextCreate(why);
    const err = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-1")).catch((e: unknown) => e);
    expect(calls("PUT", /asks/).at(-1)!.status).toBe(status);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).extra).toMatchObject({ field: "offer_id" });
    expect((err as Error).message).toMatch(message);
    expect(vast.instances.size).toBe(0);
  });

  it("refuses a wrong key with a message naming VAST_API_KEY, sent as a Bearer token (a search answers it 404, a show 401)", async () => {
    const wrong = connect({ apiKey: "not-the-key" });
    for (const call of [() => wrong.searchOffers({}), () => wrong.getInstance("31000001")]) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OperationFailedError);
      expect((err as OperationFailedError).extra).toMatchObject({ code: "MARKETPLACE_AUTH_REFUSED" });
      expect((err as Error).message).toMatch(/VAST_API_KEY/);
      expect((err as Error).message).not.toContain("not-the-key");
    }
    expect(vast.requests.filter((r) => r.path === "/api/v0/bundles/").length).toBeGreaterThan(0);
  });

  it("answers UnavailableError for 5xx and an unreachable host, and never repeats a create that may have arrived", async () => {
    vast.failNext(1, 502);
    const err = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-1")).catch((e: unknown) => e);
    // Nothing was rented: looked for by its label, then reported as an outcome not known.
    expect(err).toBeInstanceOf(OutcomeUnknownError);
    expect((err as Error).message).toMatch(/nothing labelled gpu-1 is listed after 1 attempt:/);
    expect(calls("PUT", /asks/)).toHaveLength(1);
    expect(calls("GET", /^\/api\/v1\/instances\/$/).length).toBeGreaterThanOrEqual(2);
    expect(vast.instances.size).toBe(0);
    const unreachable = connect({ baseUrl: "http://127.0.0.1:1" });
    await expect(unreachable.getInstance("31000001")).rejects.toThrow(UnavailableError);
  });

  it("retries reads after 5xx", async () => {
    vast.failNext(2, 503);
    expect(await market.searchOffers({ limit: 2 })).toHaveLength(2);
    expect(calls("POST", /bundles/)).toHaveLength(3);
  });
});

describe("vast.ai creates whose answer is lost", () => {
  it.each([501, 505, 520, 524, "drop"] as const)("answered %s after renting, adopt the machine by its label: one create, one machine", async (answer) => {
    vast.failCreatesAfterRenting(1, answer);
    const ask = rentableAsk();
    const adopted = await market.createInstance(llmRequest(String(ask.id), "gpu-lost-1"));
    expect(calls("PUT", /asks/)).toHaveLength(1);
    expect([...vast.instances.values()].map((m) => String(m.id))).toEqual([adopted.id]);
    expect(adopted).toMatchObject({ label: "gpu-lost-1", offerId: String(ask.id) });
  });

  it("answered 524 without renting, are looked for and left unknown, never refused: vast.ai is not sent the create twice", async () => {
    vast.failNext(1, 524);
    const err = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-lost-2")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OutcomeUnknownError);
    expect(calls("PUT", /asks/)).toHaveLength(1);
    expect(vast.instances.size).toBe(0);
  });
});

describe("vast.ai slow creates", () => {
  it("adopts by its label the one machine a create rented but answered after the timeout", async () => {
    const slow = connect({ createTimeoutMs: 300 });
    vast.answerCreatesAfter(1_000);
    const ask = rentableAsk();
    const created = await slow.createInstance(llmRequest(String(ask.id), "gpu-slow-1"));
    expect(calls("PUT", /asks/)).toHaveLength(1); // never sent twice
    expect(vast.instances.size).toBe(1);
    const [machine] = vast.instances.values();
    expect(created).toMatchObject({ id: String(machine!.id), label: "gpu-slow-1", offerId: String(ask.id) });
    await slow.close();
  });

  it("waits for a create vast.ai answers slowly, within VAST_CREATE_TIMEOUT_MS, while reads keep their short timeout", async () => {
    vast.answerCreatesAfter(2_500); // longer than the 2 s read timeout, shorter than the create timeout
    const patient = connect({ createTimeoutMs: 5_000 });
    const created = await patient.createInstance(llmRequest(String(rentableAsk().id), "gpu-slow-2"));
    expect(created.label).toBe("gpu-slow-2");
    expect(calls("GET", /^\/api\/v1\/instances\/$/)).toHaveLength(0); // answered: nothing to look for
    await patient.close();
  });
});

describe("vast.ai rate limits", () => {
  it("retries 429 (plain text or JSON, no Retry-After) with backoff, a create included, renting once", async () => {
    vast.throttle(5);
    const created = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-1"));
    expect(calls("PUT", /asks/)).toHaveLength(6);
    expect(vast.instances.size).toBe(1);
    vast.throttle(3);
    const patient = connect({ backoffMs: 40, maxBackoffMs: 400 });
    expect((await patient.getInstance(created.id))!.label).toBe("gpu-1");
    const shows = calls("GET", /^\/api\/v0\/instances\/\d+\/$/).slice(-4);
    const gaps = shows.slice(1).map((r, i) => r.at - shows[i]!.at);
    // The backoff doubles: the third wait is at least half of 4 x 40 ms, whatever the jitter.
    expect(gaps[2]!).toBeGreaterThanOrEqual(80);
    expect(gaps[0]!).toBeGreaterThanOrEqual(20);
  });

  it("gives up after its retries with UnavailableError, having rented nothing", async () => {
    vast.throttle(100);
    const err = await market.createInstance(llmRequest(String(rentableAsk().id), "gpu-1")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnavailableError);
    expect((err as Error).message).toMatch(/429.*API requests too frequent/);
    expect(calls("PUT", /asks/)).toHaveLength(7);
    expect(vast.instances.size).toBe(0);
  });

  it("waits the threshold a 429 names, and keeps that interval for the endpoint from then on", async () => {
    vast.throttle(1, true); // "API requests too frequent endpoint threshold=0.5"
    const patient = connect({ backoffMs: 10, maxBackoffMs: 10 });
    await patient.getInstance("31000001");
    await patient.getInstance("31000001");
    const shows = calls("GET", /^\/api\/v0\/instances\/\d+\/$/).slice(-3);
    expect(shows).toHaveLength(3); // the 429, its retry, the next read
    expect(shows[1]!.at - shows[0]!.at).toBeGreaterThanOrEqual(490);
    expect(shows[2]!.at - shows[1]!.at).toBeGreaterThanOrEqual(490);
  });

  it("keeps vast.ai's documented interval of each endpoint, with a margin, when VAST_MIN_INTERVAL_MS is unset", async () => {
    await vast.close();
    vast = await startVastEmulator({ apiKey: API_KEY, minIntervalMs: { show: 2_000 } });
    const documented = connect({ minIntervalMs: undefined, retries: 0 });
    await documented.getInstance("31000001");
    await documented.getInstance("31000001");
    const shows = calls("GET", /^\/api\/v0\/instances\/\d+\/$/);
    expect(shows.map((r) => r.status)).toEqual([200, 200]); // never 429
    // Sent 2.2 s apart (the margin); they arrive at least the documented 2 s apart, whatever the first one's connection took.
    expect(shows[1]!.at - shows[0]!.at).toBeGreaterThanOrEqual(2_000);
    await documented.close();
    expect(VAST_INTERVALS_MS).toMatchObject({
      "PUT /api/v0/asks/{id}/": 4_500,
      "DELETE /api/v0/instances/{id}/": 3_000,
      "GET /api/v0/instances/{id}/": 2_000,
      "GET /api/v1/instances/": 1_000,
    });
    expect(thresholdMsOf("API requests too frequent endpoint threshold=4.5")).toBe(4_500);
    expect(thresholdMsOf({ success: false, error: "rate_limit_exceeded", msg: "API requests too frequent endpoint threshold=2.0" })).toBe(2_000);
    expect(thresholdMsOf("API requests too frequent")).toBeUndefined();
  });

  it("keeps each endpoint under vast.ai's minimum interval without holding other endpoints back", async () => {
    await vast.close();
    vast = await startVastEmulator({ apiKey: API_KEY, minIntervalMs: 150 });
    const limited = connect({ minIntervalMs: 200, retries: 0 });
    const started = Date.now();
    await Promise.all([1, 2, 3, 4].map(() => limited.getInstance("31000001")));
    expect(Date.now() - started).toBeGreaterThanOrEqual(3 * 200 - 20);
    const searched = Date.now();
    await limited.searchOffers({ limit: 1 });
    expect(Date.now() - searched).toBeLessThan(200);
    expect(vast.requests).toHaveLength(5); // no 429 to retry: every call went through the first time
  });
});
