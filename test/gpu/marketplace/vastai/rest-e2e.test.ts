import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../../src/gpu/creation/launch-plan.js";
import { findTemplate } from "../../../../src/gpu/creation/templates.js";
import { canServe, dphTotal, fitsTemplate, type VastAsk } from "../../../support/vastai/catalogue.js";
import type { VastEmulator } from "../../../support/vastai/emulator.js";
import type { TestDatabase } from "../../../support/postgres.js";
import type { TestServer } from "../../../support/server.js";
import { startVastService, type VastService } from "../../../support/vastai/service.js";
import { rest, waitFor } from "../../helpers.js";
import { minMegabytes } from "../../../../src/gpu/marketplace/vastai/vastai-wire.js";

// GpuService with MARKETPLACE=vastai, end to end through its REST API against the vast.ai
// emulator: the adapter is built from the configuration exactly as `npm start` builds it.

const API_KEY = "vast-e2e-key-0123456789";

let vast: VastEmulator;
let db: TestDatabase;
let service: VastService;
let server: TestServer;

beforeAll(async () => {
  service = await startVastService({ apiKey: API_KEY, provisioningMs: 200, loadingMs: 200, minIntervalMs: 10 }, {
    VAST_MIN_INTERVAL_MS: "15",
    VAST_CREATE_TIMEOUT_MS: "1000",
    VAST_BACKOFF_MS: "10",
    GPU_STATUS_SYNC_MS: "50",
    GPU_PROBE_TIMEOUT_MS: "500",
  });
  ({ vast, db, server } = service);
});

afterAll(async () => {
  await service?.close();
});

const record = (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();
const rentable = (ask: VastAsk) => ask.verified && vast.isRentable(ask.id);
/** The asks a template may rent now, cheapest first, as its create orders them. */
const fittingAsks = (name: string) =>
  vast.asks
    .filter((a) => rentable(a) && fitsTemplate(a, findTemplate(name)!, LLM_DISK_GB))
    .sort((a, b) => dphTotal(a, LLM_DISK_GB) - dphTotal(b, LLM_DISK_GB) || a.id - b.id);

describe("MARKETPLACE=vastai through the REST API", () => {
  it("searches, creates from a template on the cheapest offer within its limits, runs the model, costs, logs and destroys", async () => {
    const search = await rest<{ offers: Array<{ id: string; gpu_name: string; gpu_ram: number; dph_total: number }> }>(
      server.url,
      "POST",
      "/api/gpu/search-offers",
      { gpu_name: "4090", max_price: 2, sort_by: "price", limit: 5 },
    );
    expect(search.status).toBe(200);
    expect(search.body.offers.length).toBeGreaterThan(0);
    expect(search.body.offers.every((o) => o.gpu_name === "RTX 4090" && o.gpu_ram === 24 && o.dph_total <= 2)).toBe(true);

    // research: >= 16 GB per GPU, <= $1/h at the disk the create asks for, and a host that can serve its 14B model.
    const cheapest = fittingAsks("research")[0]!;
    const cheaperUnfit = vast.asks.filter((a) => rentable(a) && dphTotal(a, LLM_DISK_GB) < dphTotal(cheapest, LLM_DISK_GB));
    expect(cheaperUnfit.length).toBeGreaterThan(0); // the pick passed over cheaper hosts that cannot serve
    const searchesBefore = vast.requests.filter((r) => r.path === "/api/v0/bundles/").length;

    const created = await rest<{ instance_id: string; status: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=research");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    const searches = vast.requests.filter((r) => r.path === "/api/v0/bundles/").slice(searchesBefore);
    expect(searches).toHaveLength(1); // one search within the template's limits, not the catalogue
    expect(searches[0]!.body).toMatchObject({
      dph_total: { lte: 1 },
      gpu_ram: { gte: minMegabytes(16) },
      gpu_total_ram: { gte: minMegabytes(40) },
      num_gpus: { in: [1, 2, 4, 8] },
      cuda_max_good: { gte: 12.8 },
      direct_port_count: { gte: 1 },
      reliability2: { gte: 0.95 },
      external: { eq: false },
      rentable: { eq: true },
      allocated_storage: LLM_DISK_GB,
    });
    const row = await record(id);
    expect(row).toMatchObject({ offer_id: String(cheapest.id), cost_per_hour: dphTotal(cheapest, LLM_DISK_GB) });
    expect(vast.isRentable(cheapest.id)).toBe(false);
    const machine = vast.instances.get(Number(row.market_instance_id))!;
    expect(machine.label).toContain(id);

    await waitFor("running_llm", async () => ((await record(id)).status === "running_llm" ? true : undefined), 15_000);
    const enhanced = await rest<{ data: { llm_status: { running: boolean }; basic_status: { public_ip: string } } }>(
      server.url,
      "GET",
      `/api/gpu/instances/${id}/enhanced`,
    );
    expect(enhanced.body.data.llm_status.running).toBe(true);
    expect(enhanced.body.data.basic_status.public_ip).toBe("127.0.0.1");

    const cost = await rest<{ cost_per_hour: number; cost_includes: string }>(server.url, "GET", `/api/gpu/instances/${id}/cost-analysis`);
    expect(cost.status).toBe(200);
    expect(cost.body.cost_per_hour).toBeCloseTo(dphTotal(cheapest, LLM_DISK_GB), 4);
    // The price covers the GPUs and the disk asked for; the cost says that traffic is billed beside it.
    expect(cost.body.cost_includes).toMatch(/GPUs and the allocated disk; internet traffic is billed by vast.ai per GB beside it/);

    const logs = await rest<{ logs: Array<{ operation: string; result: string }> }>(server.url, "GET", `/api/gpu/instances/${id}/logs`);
    expect(logs.body.logs.map((l) => l.operation)).toContain("create_instance");
    expect(logs.body.logs.some((l) => l.operation === "status_change" && l.result.endsWith("running_llm"))).toBe(true);

    const destroyed = await rest<{ success: boolean; status: string }>(server.url, "DELETE", `/api/gpu/instances/${id}`);
    expect(destroyed.body).toMatchObject({ success: true, status: "destroyed" });
    expect(vast.instances.has(machine.id)).toBe(false);
    expect(vast.isRentable(cheapest.id)).toBe(true);
    expect((await record(id)).status).toBe("destroyed");
  });

  it.each(["high_performance", "budget", "research"])("creates from %s only on a host that can serve: a direct port, CUDA 12.8, reliable, not external", async (name) => {
    const expected = fittingAsks(name)[0]!;
    const created = await rest<{ instance_id: string }>(server.url, "POST", `/api/gpu/instances/from-template?template_name=${name}`);
    expect(created.status).toBe(200);
    const row = await record(created.body.instance_id);
    const ask = vast.asks.find((a) => String(a.id) === row.offer_id)!;
    expect(ask.id).toBe(expected.id);
    expect(canServe(ask)).toBe(true);
    expect(row.start_command).toContain(`--tensor-parallel-size ${ask.num_gpus}`);
    expect((await rest(server.url, "DELETE", `/api/gpu/instances/${created.body.instance_id}`)).status).toBe(200);
  });

  it("answers 404 for an unknown offer and 409 for one rented meanwhile, leaving no active record", async () => {
    const active = async () => (await db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"])).length;
    const activeBefore = await active();
    const unknown = await rest(server.url, "POST", "/api/gpu/instances", { offer_id: "4299999" });
    expect(unknown.status).toBe(404);
    const rival = vast.addForeignInstance("someone-else");
    const taken = vast.instances.get(rival)!.askId;
    const conflict = await rest(server.url, "POST", "/api/gpu/instances", { offer_id: String(taken) });
    expect(conflict.status).toBe(409);
    expect(await active()).toBe(activeBefore);
  });

  it("rides out a burst of 429s on the create", async () => {
    vast.throttle(4);
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    expect((await record(created.body.instance_id)).status).not.toBe("failed");
    await rest(server.url, "DELETE", `/api/gpu/instances/${created.body.instance_id}`);
  });

  it("fails a record whose container cannot start and gives its machine back", async () => {
    vast.failNextStart();
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const machineId = Number((await record(created.body.instance_id)).market_instance_id);
    await waitFor("failed", async () => ((await record(created.body.instance_id)).status === "failed" ? true : undefined), 10_000);
    await waitFor("the machine destroyed", async () => (vast.instances.has(machineId) ? undefined : true), 10_000);
  });

  it("rides out a reboot and a frozen host with auto_destroy on, and destroys only a machine that really ended", async () => {
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget", {
      custom_config: { auto_destroy: true },
    });
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    await waitFor("running_llm", async () => ((await record(id)).status === "running_llm" ? true : undefined), 15_000);
    const machineId = Number((await record(id)).market_instance_id);
    const rounds = () => new Promise((resolve) => setTimeout(resolve, 400)); // several sync rounds

    vast.setStatus(machineId, "rebooting");
    await waitFor("loading while rebooting", async () => ((await record(id)).status === "loading" ? true : undefined), 5_000);
    vast.setStatus(machineId, "frozen");
    await rounds();
    expect((await record(id)).status).toBe("loading");
    vast.setStatus(machineId, "offline");
    await rounds();
    expect(vast.instances.has(machineId)).toBe(true);
    vast.setStatus(machineId, "running");
    await waitFor("running_llm again", async () => ((await record(id)).status === "running_llm" ? true : undefined), 15_000);
    const logs = await rest<{ logs: Array<{ operation: string }> }>(server.url, "GET", `/api/gpu/instances/${id}/logs?limit=100`);
    expect(logs.body.logs.map((l) => l.operation)).not.toContain("auto_destroy");

    vast.setStatus(machineId, "unloaded");
    await waitFor("destroyed once unloaded", async () => ((await record(id)).status === "destroyed" ? true : undefined), 10_000);
    expect(vast.instances.has(machineId)).toBe(false);
  });

  it("moves on to the next offer when the cheapest is taken between search and rent (vast.ai answers 404)", async () => {
    const [cheapest, next] = fittingAsks("budget");
    // Someone else rents the cheapest ask right after our search, before our create arrives.
    vast.onCreate(() => {
      vast.onCreate(undefined);
      vast.addForeignInstance("someone-quicker", cheapest!.id);
    });
    const requestsBefore = vast.requests.length;
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const row = await record(created.body.instance_id);
    expect(row.offer_id).toBe(String(next!.id));
    // (A create answered 429 by the emulator's interval is sent again: count each ask once.)
    const creates = [...new Set(vast.requests.slice(requestsBefore).filter((r) => r.method === "PUT").map((r) => r.path))];
    expect(creates).toEqual([`/api/v0/asks/${cheapest!.id}/`, `/api/v0/asks/${next!.id}/`]);
    await waitFor("running", async () => (["running", "running_llm"].includes((await record(created.body.instance_id)).status) ? true : undefined), 15_000);
    await rest(server.url, "DELETE", `/api/gpu/instances/${created.body.instance_id}`);
  });

  it("keeps a new instance that vast.ai shows only seconds later creating, then running: nothing destroyed", async () => {
    vast.showLag(8_000);
    try {
      const created = await rest<{ instance_id: string; status: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
      expect(created.status).toBe(200);
      expect(created.body.status).toBe("creating");
      const machineId = Number((await record(created.body.instance_id)).market_instance_id);
      await new Promise((resolve) => setTimeout(resolve, 5_000)); // many sync and reconcile rounds while vast.ai shows nothing
      expect((await record(created.body.instance_id)).status).toBe("creating");
      expect(vast.instances.has(machineId)).toBe(true);
      await waitFor("running", async () => (["running", "running_llm"].includes((await record(created.body.instance_id)).status) ? true : undefined), 15_000);
      expect(vast.instances.has(machineId)).toBe(true);
      await rest(server.url, "DELETE", `/api/gpu/instances/${created.body.instance_id}`);
    } finally {
      vast.showLag(0);
    }
  });

  it("adopts the one machine of a create whose answer came after VAST_CREATE_TIMEOUT_MS: no second rent, nothing failed", async () => {
    vast.answerCreatesAfter(2_500); // vast.ai rents at once and answers late
    try {
      const machinesBefore = vast.instances.size;
      const requestsBefore = vast.requests.length;
      const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
      expect(created.status).toBe(200);
      const row = await record(created.body.instance_id);
      expect(vast.instances.size).toBe(machinesBefore + 1);
      const machine = vast.instances.get(Number(row.market_instance_id))!;
      expect(machine.label).toBe(row.market_label);
      // Sent once: only the emulator's 429s (its interval) were sent again.
      const puts = vast.requests.slice(requestsBefore).filter((r) => r.method === "PUT");
      expect(puts.filter((r) => r.status !== 429)).toHaveLength(1);
      await waitFor("running", async () => (["running", "running_llm"].includes((await record(created.body.instance_id)).status) ? true : undefined), 15_000);
      // No record failed while its machine bills.
      const failed = await db.knex("gpu_instances").where({ status: "failed" }).whereNotNull("market_instance_id");
      expect(failed.filter((r) => vast.instances.has(Number(r.market_instance_id)))).toEqual([]);
      await rest(server.url, "DELETE", `/api/gpu/instances/${created.body.instance_id}`);
    } finally {
      vast.answerCreatesAfter(0);
    }
  });

  it("never touches a machine labelled by someone else", async () => {
    const foreign = vast.addForeignInstance("my-training-run");
    await new Promise((resolve) => setTimeout(resolve, 500)); // several sync and reconcile rounds
    expect(vast.instances.has(foreign)).toBe(true);
  });
});
