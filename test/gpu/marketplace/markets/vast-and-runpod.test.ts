import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../../src/gpu/creation/launch-plan.js";
import { findTemplate } from "../../../../src/gpu/creation/templates.js";
import { startVastRunpodService, type VastRunpodService } from "../../../support/markets/vast-and-runpod.js";
import { dphTotal, fitsTemplate, type VastAsk } from "../../../support/vastai/catalogue.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, readyIds, waitForEndpoint } from "../../endpoints/helpers.js";
import { rest, waitFor } from "../../helpers.js";
import { marketsApi, type MarketAnswer, type Offer } from "./markets-api.js";

// GpuService with MARKETPLACE=vastai,runpod against both emulators at once, on the real
// PostgreSQL, through its REST API and its endpoint proxy: a RunPod offer named by its id rented
// and serving, an endpoint's replica rented where it is cheapest, an auto-pick refused in one
// market and rented in the other, an endpoint serving from RunPod while RunPod's API is down, an
// endpoint launched on RunPod while vast.ai's creates fail, and an endpoint healed on RunPod while
// vast.ai has nothing that fits.

let service: VastRunpodService;
const { url, market: marketOf, record } = marketsApi(() => service);
/** The market's own id of an instance (its record keeps `<market>:<id>`). */
const ownId = async (id: string) => ((await record(id)).market_instance_id as string).replace(/^\w+:/, "");
const statusIs = (id: string, status: string) => async () => ((await record(id)).status === status ? true : undefined);

beforeAll(async () => {
  // A create with no answer is looked for 1 s (30 s by default), and fails 3 s after it (5 min by default).
  service = await startVastRunpodService({ ...FAST_ENDPOINT_ENV, GPU_STATUS_SYNC_MS: "100", VAST_CREATE_LOOKUP_MS: "1000", GPU_CREATION_GRACE_MS: "3000" });
});

afterAll(async () => {
  await service?.close();
  expect(service.runpod.breaches).toEqual([]);
});

/** Every vast.ai ask as it was before a test changed the catalogue. */
let saved: VastAsk[] = [];
afterEach(async () => {
  for (const [i, ask] of saved.entries()) Object.assign(service.vast.asks[i]!, ask);
  saved = [];
  service.vast.onCreate(undefined);
  service.runpod.onCreate(undefined);
  service.runpod.failNext(0, 503);
  service.runpod.delay(0);
  // Nothing a test rented outlives it.
  const live = await service.db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"]).select("instance_id");
  for (const { instance_id } of live) await rest(url(), "DELETE", `/api/gpu/instances/${instance_id}`);
});

const fitting = (template: string) => service.vast.asks.filter((a) => a.rentable && a.verified && fitsTemplate(a, findTemplate(template)!, LLM_DISK_GB));

/** vast.ai's offers for the template dearer than RunPod's cheapest ($0.34/h), still under the template's cap. */
function makeVastDearer(template: string): void {
  saved = service.vast.asks.map((a) => ({ ...a }));
  for (const ask of fitting(template)) ask.dph_base += 0.2;
}

/** vast.ai has no offer that fits the template. */
function makeVastDry(template: string): void {
  saved = service.vast.asks.map((a) => ({ ...a }));
  for (const ask of fitting(template)) ask.rentable = false;
}

async function chat(path: string, key?: string): Promise<Response> {
  return fetch(`${path}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: findTemplate("budget")!.config!.llmModelName, messages: [{ role: "user", content: "hello" }], max_tokens: 8 }),
  });
}

describe("MARKETPLACE=vastai,runpod: the service on both emulators at once", () => {
  it("rents an explicit RunPod offer that serves its model with its key on the direct port", async () => {
    const offerId = "runpod:community-1x-NVIDIA_GeForce_RTX_4090";
    const started = Date.now();
    const search = await rest<{ offers: Offer[]; markets: MarketAnswer[] }>(url(), "POST", "/api/gpu/search-offers", { market: "runpod", limit: 100 });
    expect(search.body.offers.map((o) => o.id)).toContain(offerId);

    const created = await rest<{ instance_id: string; model_api_key: string }>(url(), "POST", "/api/gpu/instances", { offer_id: offerId, template_name: "budget" });
    expect(created.status).toBe(200);
    const { instance_id: id, model_api_key: key } = created.body;
    expect(await record(id)).toMatchObject({ market: "runpod", offer_id: offerId });
    const create = service.runpod.requests.find((r) => r.method === "POST" && r.path === "/v2/pods" && (r.body as { name: string }).name.includes(id))!;
    expect(create.body).toMatchObject({ cloud: "COMMUNITY", gpu: { id: "NVIDIA GeForce RTX 4090", count: 1 }, ports: ["8000/tcp"], env: { VLLM_API_KEY: key } });
    // vast.ai was not asked to rent anything.
    expect(service.vast.requests.filter((r) => r.method === "PUT" && r.at >= started)).toEqual([]);

    await waitFor("running_llm on RunPod", statusIs(id, "running_llm"), 20_000);
    const enhanced = await rest<{ data: { llm_status: { port: number }; basic_status: { public_ip: string } } }>(url(), "GET", `/api/gpu/instances/${id}/enhanced`);
    const direct = `http://${enhanced.body.data.basic_status.public_ip}:${enhanced.body.data.llm_status.port}`;
    // The direct TCP port of the pod's model server, not RunPod's HTTPS proxy.
    const pod = service.runpod.pods.get(await ownId(id))!;
    expect(enhanced.body.data.llm_status.port).toBe(pod.server!.port);
    expect((await chat(direct)).status).toBe(401);
    const answer = await chat(direct, key);
    expect(answer.status).toBe(200);
    expect(((await answer.json()) as { choices: unknown[] }).choices).toHaveLength(1);
    expect((await marketOf("runpod")).instances.map((i) => i.instance_id)).toContain(id);

    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
    expect(service.runpod.pods.has(pod.id)).toBe(false);
  });

  it("serves an endpoint from a replica rented on RunPod, where its template is cheapest", async () => {
    makeVastDearer("budget");
    // vast.ai still has offers the template may rent, each dearer than RunPod's $0.34/h.
    expect(fitting("budget").length).toBeGreaterThan(0);
    expect(Math.min(...fitting("budget").map((a) => dphTotal(a, LLM_DISK_GB)))).toBeGreaterThan(0.34);

    const started = Date.now();
    await createEndpoint(url(), { name: "on-runpod", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(url(), "on-runpod", "ready", (e) => e.state === "ready", 30_000);
    const [replica] = readyIds(ready) as [string];
    expect(await record(replica)).toMatchObject({ market: "runpod", offer_id: "runpod:community-1x-NVIDIA_GeForce_RTX_4090" });
    expect(service.vast.requests.filter((r) => r.method === "PUT" && r.at >= started)).toEqual([]);

    const answer = await chat(`${url()}/endpoints/on-runpod`);
    expect(answer.status).toBe(200);
    expect(((await answer.json()) as { choices: unknown[] }).choices).toHaveLength(1);
    await deleteAndWait(url(), "on-runpod", service.db.knex);
    expect([...service.runpod.pods.values()].filter((p) => p.name.includes(replica))).toEqual([]);
  });

  it("fails an auto-pick over from RunPod, which has no capacity for its cheapest offer at create time, to vast.ai", async () => {
    makeVastDearer("budget");
    const started = Date.now();
    service.runpod.onCreate(() => service.runpod.refuseNextCreate(400));
    const created = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;

    const refusals = service.runpod.requests.filter((r) => r.method === "POST" && r.path === "/v2/pods" && r.at >= started);
    expect(refusals.map((r) => r.status)).toEqual([400]);
    expect(refusals[0]!.body).toMatchObject({ cloud: "COMMUNITY", gpu: { id: "NVIDIA GeForce RTX 4090", count: 1 } });
    const row = await record(id);
    expect(row).toMatchObject({ market: "vastai" });
    expect(row.offer_id).toMatch(/^vastai:\d+$/);
    const rented = service.vast.requests.find((r) => r.method === "PUT" && r.at >= started)!;
    expect(rented.status).toBe(200);
    await waitFor("running_llm on vast.ai", statusIs(id, "running_llm"), 20_000);
    const readyAt = Date.now();

    const since = (t: number) => `+${t - started} ms`;
    console.log(
      [
        `failover timeline (auto-pick of template budget, request sent at 0):`,
        `  ${since(refusals[0]!.at)}  runpod refused community-1x-NVIDIA_GeForce_RTX_4090 (HTTP 400, no capacity)`,
        `  ${since(rented.at)}  vastai rented ${row.offer_id} (HTTP ${rented.status})`,
        `  ${since(readyAt)}  ${id} running_llm on vastai (seen by the test's poll)`,
      ].join("\n"),
    );
    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });

  it("fails an auto-pick over from vast.ai, which says its cheapest offer is no longer available, to RunPod", async () => {
    saved = service.vast.asks.map((a) => ({ ...a }));
    const [ask] = fitting("budget");
    for (const other of fitting("budget")) if (other !== ask) other.rentable = false;
    ask!.dph_base = 0.01;
    const started = Date.now();
    service.vast.onCreate(() => service.vast.refuseNextCreate("gone"));
    const created = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    const refusals = service.vast.requests.filter((r) => r.method === "PUT" && r.at >= started);
    expect(refusals).toHaveLength(1);
    expect(refusals[0]!.path).toContain(`/asks/${ask!.id}/`);
    expect(refusals[0]!.status).toBeGreaterThanOrEqual(400);
    expect(await record(id)).toMatchObject({ market: "runpod", offer_id: "runpod:community-1x-NVIDIA_GeForce_RTX_4090" });
    const rented = service.runpod.requests.find((r) => r.method === "POST" && r.path === "/v2/pods" && r.at >= started)!;
    expect(rented.status).toBe(201);
    await waitFor("running_llm on RunPod", statusIs(id, "running_llm"), 20_000);
    const readyAt = Date.now();
    const since = (t: number) => `+${t - started} ms`;
    console.log(
      [
        `failover timeline (auto-pick of template budget, request sent at 0):`,
        `  ${since(refusals[0]!.at)}  vastai refused ask ${ask!.id} (HTTP ${refusals[0]!.status}, no longer available)`,
        `  ${since(rented.at)}  runpod rented community-1x-NVIDIA_GeForce_RTX_4090 (HTTP ${rented.status})`,
        `  ${since(readyAt)}  ${id} running_llm on runpod (seen by the test's poll)`,
      ].join("\n"),
    );
    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });

  it("keeps an endpoint serving from RunPod while RunPod's API fails and then hangs: its replica is neither lost nor replaced", async () => {
    makeVastDearer("budget");
    await createEndpoint(url(), { name: "runpod-api-down", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const [replica] = readyIds(await waitForEndpoint(url(), "runpod-api-down", "ready on RunPod", (e) => e.state === "ready", 30_000)) as [string];
    expect(await record(replica)).toMatchObject({ market: "runpod", status: "running_llm" });
    const from = Date.now();
    const podCalls = () => service.runpod.requests.filter((r) => r.at >= from && r.path.startsWith("/v2/pods"));
    const serves = async () => {
      for (let i = 0; i < 5; i++) expect((await chat(`${url()}/endpoints/runpod-api-down`)).status).toBe(200);
    };

    // RunPod's API answers 503 to everything; its pods' model servers answer as before.
    service.runpod.failNext(1_000_000, 503);
    await waitFor("three sync rounds answered 503", async () => (podCalls().filter((r) => r.method === "GET" && r.status === 503).length >= 3 ? true : undefined), 20_000);
    await serves();
    // Then it does not answer at all (longer than MARKETPLACE_TIMEOUT_MS).
    service.runpod.failNext(0, 503);
    service.runpod.delay(30_000);
    const hungFrom = Date.now();
    await waitFor("two sync rounds asking a hanging RunPod", async () => (podCalls().filter((r) => r.method === "GET" && r.at >= hungFrom).length >= 2 ? true : undefined), 20_000);
    await new Promise((resolve) => setTimeout(resolve, 3_000)); // past the timeout of the rounds that asked
    await serves();
    expect(await marketOf("runpod")).toMatchObject({ state: "failing" });

    // Throughout: the same replica, ready and running_llm; nothing rented, destroyed or replaced anywhere.
    const endpoint = await waitForEndpoint(url(), "runpod-api-down", "still ready", (e) => e.state === "ready", 1_000);
    expect(readyIds(endpoint)).toEqual([replica]);
    expect(await record(replica)).toMatchObject({ status: "running_llm", destroyed_at: null });
    expect(podCalls().filter((r) => r.method !== "GET")).toEqual([]);
    expect(service.vast.requests.filter((r) => r.method === "PUT" && r.at >= from)).toEqual([]);
    const events = (await eventsOf(url(), "runpod-api-down")).filter((e) => Date.parse(e.at) >= from);
    expect(events.filter((e) => ["launched", "launch_failed", "not_ready", "unhealthy", "replaced", "ended", "drained"].includes(e.kind))).toEqual([]);

    service.runpod.delay(0);
    await waitFor("runpod ok again", async () => ((await marketOf("runpod")).state === "ok" ? true : undefined), 20_000);
    expect(await record(replica)).toMatchObject({ status: "running_llm", destroyed_at: null });
    await deleteAndWait(url(), "runpod-api-down", service.db.knex);
  });

  it("launches an endpoint's replica on RunPod in the same round when vast.ai answers its creates 500, renting nothing on vast.ai", async () => {
    // vast.ai is the cheaper market for the template (its default catalogue); its creates fail with a 5xx, renting nothing.
    let creates = 0;
    service.vast.onCreate(() => {
      creates++;
      throw new Error("upstream failure");
    });
    const from = Date.now();
    await createEndpoint(url(), { name: "vast-5xx", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const [replica] = readyIds(await waitForEndpoint(url(), "vast-5xx", "ready", (e) => e.state === "ready", 30_000)) as [string];
    expect(await record(replica)).toMatchObject({ market: "runpod" });
    const puts = service.vast.requests.filter((r) => r.method === "PUT" && r.at >= from);
    expect(puts.length).toBeGreaterThan(0);
    expect(puts.every((r) => r.status === 500)).toBe(true);
    expect(creates).toBe(puts.length);
    // A create answered 5xx is looked up by its label before the next candidate: nothing of this launch runs on vast.ai.
    expect([...service.vast.instances.values()].filter((i) => i.createdAt >= from)).toEqual([]);
    const events = await eventsOf(url(), "vast-5xx");
    const failed = events.filter((e) => e.kind === "launch_failed");
    expect(failed).toHaveLength(1);
    expect(failed[0]!.detail).toMatch(/failed in vastai: .*; trying runpod now$/);
    expect(events.find((e) => e.kind === "launched")!.instance_id).toBe(replica);
    // The launch given up on vast.ai: its record fails once the creation grace is over (no machine
    // showed up), and its replica goes with it, with no launch failure counted for the endpoint.
    const givenUp = failed[0]!.instance_id!;
    await waitFor("the given-up record failed", statusIs(givenUp, "failed"), 20_000);
    await waitFor("the given-up replica dropped", async () => ((await eventsOf(url(), "vast-5xx")).some((e) => e.kind === "replaced" && e.instance_id === givenUp) ? true : undefined), 20_000);
    expect(await service.db.knex("gpu_endpoint_replicas").where({ instance_id: givenUp }).whereNull("removed_at").first()).toBeUndefined();
    expect((await service.db.knex("gpu_endpoints").where({ name: "vast-5xx" }).first()).launch_failures).toBe(0);
    expect(readyIds(await waitForEndpoint(url(), "vast-5xx", "still ready", (e) => e.state === "ready", 1_000))).toEqual([replica]);
    await deleteAndWait(url(), "vast-5xx", service.db.knex);
  });

  it("destroys the machine of a launch it gave up when vast.ai shows it late, keeping the replica rented on RunPod", async () => {
    // vast.ai rents the machine but answers after the create's timeout (2 s), and lists it only
    // 5 s after it rented it, past the 1 s lookup: the launch goes on on RunPod, and the late
    // machine is destroyed when it shows up (adopted and destroyed, or destroyed as an orphan
    // when the creation grace failed its record first: never left running).
    service.vast.answerCreatesAfter(2_500);
    service.vast.showLag(5_000);
    const from = Date.now();
    try {
      await createEndpoint(url(), { name: "vast-late", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
      const [replica] = readyIds(await waitForEndpoint(url(), "vast-late", "ready", (e) => e.state === "ready", 30_000)) as [string];
      expect(await record(replica)).toMatchObject({ market: "runpod" });
      const [late] = [...service.vast.instances.values()].filter((i) => i.createdAt >= from);
      expect(late).toBeDefined();
      await waitFor("the late vast.ai machine destroyed", async () => (service.vast.instances.has(late!.id) ? undefined : true), 20_000);
      expect(readyIds(await waitForEndpoint(url(), "vast-late", "still ready", (e) => e.state === "ready", 1_000))).toEqual([replica]);
      expect((await service.db.knex("gpu_endpoints").where({ name: "vast-late" }).first()).launch_failures).toBe(0);
      await deleteAndWait(url(), "vast-late", service.db.knex);
    } finally {
      service.vast.answerCreatesAfter(0);
      service.vast.showLag(0);
    }
  });

  it("heals an endpoint on RunPod when its replica on vast.ai is lost while vast.ai has no fitting offer", async () => {
    await createEndpoint(url(), { name: "heals-on-runpod", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(url(), "heals-on-runpod", "ready on vast.ai", (e) => e.state === "ready", 30_000);
    const [victim] = readyIds(ready) as [string];
    expect(await record(victim)).toMatchObject({ market: "vastai" });

    makeVastDry("budget");
    const dryFrom = Date.now();
    const machine = service.vast.instances.get(Number(await ownId(victim)))!;
    service.vast.setStatus(machine.id, "exited");
    const healed = await waitForEndpoint(url(), "heals-on-runpod", "healed", (e) => e.state === "ready" && readyIds(e).length === 1 && !readyIds(e).includes(victim), 40_000);
    const [replacement] = readyIds(healed) as [string];
    expect(await record(replacement)).toMatchObject({ market: "runpod", offer_id: "runpod:community-1x-NVIDIA_GeForce_RTX_4090" });
    // vast.ai was searched but had nothing to rent; its lost machine is given back.
    expect(service.vast.requests.filter((r) => r.method === "PUT" && r.at >= dryFrom)).toEqual([]);
    await waitFor("the lost vast.ai machine destroyed", async () => (service.vast.instances.has(machine.id) ? undefined : true), 20_000);
    const answer = await chat(`${url()}/endpoints/heals-on-runpod`);
    expect(answer.status).toBe(200);
    await deleteAndWait(url(), "heals-on-runpod", service.db.knex);
  });
});
