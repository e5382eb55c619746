import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { gpuClient, rest, waitFor } from "../helpers.js";

let db: TestDatabase;
let server: TestServer;
let marketplace: SimulatedMarketplace;

beforeAll(async () => {
  db = await createTestDatabase();
  // Slow enough phases that every stored status is observed, fast enough for a test.
  marketplace = createSimulatedMarketplace({ creatingMs: 250, loadingMs: 250, modelServerStartMs: 400 });
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    marketplace,
    env: { GPU_STATUS_SYNC_MS: "40", GPU_PROBE_TIMEOUT_MS: "500" },
  });
});

afterAll(async () => {
  await server?.close();
  await marketplace?.close();
  await db?.drop();
});

interface Row {
  instance_id: string;
  market_instance_id: string | null;
  status: string;
  offer_id: string;
  destroyed_at: Date | null;
}

const record = async (id: string) => (await db.knex<Row>("gpu_instances").where({ instance_id: id }).first())!;
const logs = (id: string) =>
  db.knex("GpuExecutionLog").where({ instance_id: id }).orderBy("id") as Promise<
    Array<{ operation: string; result: string; success: boolean; execution_time: number; metadata: Record<string, unknown> }>
  >;

async function createFromTemplate(template: string, customConfig?: Record<string, unknown>) {
  const res = await rest<{ instance_id: string; status: string; message: string; success: boolean }>(
    server.url,
    "POST",
    `/api/gpu/instances/from-template?template_name=${template}`,
    customConfig ? { custom_config: customConfig } : undefined,
  );
  expect(res.status).toBe(200);
  return res.body;
}

async function statusOf(id: string) {
  const res = await rest<{ data: { db_info: { status: string }; llm_status: { running: boolean; port: number } } }>(
    server.url,
    "GET",
    `/api/gpu/instances/${id}/enhanced`,
  );
  expect(res.status).toBe(200);
  return res.body.data;
}

describe("creating an instance", () => {
  it("has the record and exactly one creation log record in the database when the response arrives", async () => {
    const created = await createFromTemplate("budget");
    expect(created).toMatchObject({ success: true, status: "creating" });
    expect(created.instance_id).toMatch(/^gpu-\d+$/);
    expect(created.message).toContain("budget");
    const row = await record(created.instance_id);
    expect(row.market_instance_id).not.toBeNull();
    const entries = await logs(created.instance_id);
    expect(entries.filter((e) => e.operation === "create_instance")).toHaveLength(1);
    expect(entries[0]).toMatchObject({ operation: "create_instance", success: true });
    expect(entries[0]!.metadata).toMatchObject({ template_name: "budget", offer_id: row.offer_id });
  });

  it("marks a failed creation failed, with one success=false log record and no active record", async () => {
    marketplace.failNextCreate();
    const before = await db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"]).count({ n: "*" });
    const res = await rest(server.url, "POST", "/api/gpu/instances/from-template?template_name=research");
    expect(res.status).toBe(500);
    expect(res.body.detail).toMatch(/provision/);
    const failed = await db.knex<Row>("gpu_instances").where({ status: "failed" });
    expect(failed).toHaveLength(1);
    expect(await logs(failed[0]!.instance_id)).toEqual([expect.objectContaining({ operation: "create_instance", success: false })]);
    const after = await db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"]).count({ n: "*" });
    expect(after).toEqual(before);
  });
});

describe("status sync", () => {
  it("moves the stored status creating -> loading -> running -> running_llm, and back to running when the model server stops", async () => {
    const { instance_id: id } = await createFromTemplate("research");
    const seen: string[] = [];
    const llm = await waitFor("running_llm", async () => {
      const data = await statusOf(id);
      if (seen.at(-1) !== data.db_info.status) seen.push(data.db_info.status);
      return data.db_info.status === "running_llm" ? data : undefined;
    });
    expect(llm.llm_status.running).toBe(true);
    expect(llm.llm_status.port).toBeGreaterThan(0);
    // The probe is real: the port answers /health.
    expect((await fetch(`http://127.0.0.1:${llm.llm_status.port}/health`)).ok).toBe(true);
    expect(seen.at(-1)).toBe("running_llm");
    const changes = (await logs(id)).filter((e) => e.operation === "status_change").map((e) => e.result);
    expect(changes).toEqual(["creating -> loading", "loading -> running", "running -> running_llm"]);

    await marketplace.stopModelServer((await record(id)).market_instance_id!);
    const back = await waitFor("running", async () => {
      const data = await statusOf(id);
      return data.db_info.status === "running" ? data : undefined;
    });
    expect(back.llm_status.running).toBe(false);
    const last = (await logs(id)).filter((e) => e.operation === "status_change").at(-1);
    expect(last?.result).toBe("running_llm -> running");
  });

  it("destroys an instance created with auto_destroy as soon as it is seen exited", async () => {
    const { instance_id: id } = await createFromTemplate("budget", { auto_destroy: true });
    await waitFor("running", async () => (["running", "running_llm"].includes((await record(id)).status) ? true : undefined));
    const marketId = (await record(id)).market_instance_id!;
    await marketplace.exitInstance(marketId);
    const destroyed = await waitFor("destroyed", async () => {
      const row = await record(id);
      return row.status === "destroyed" ? row : undefined;
    });
    expect(destroyed.destroyed_at).toBeInstanceOf(Date);
    expect(await marketplace.getInstance(marketId)).toBeUndefined();
    const entries = await logs(id);
    expect(entries.filter((e) => e.result.endsWith("-> exited"))).toHaveLength(1);
    expect(entries.filter((e) => e.operation === "auto_destroy")).toEqual([expect.objectContaining({ success: true })]);
  });

  it("writes no log record for reads that find nothing changed", async () => {
    const { instance_id: id } = await createFromTemplate("budget");
    await waitFor("running_llm", async () => ((await record(id)).status === "running_llm" ? true : undefined));
    const count = (await logs(id)).length;
    for (let i = 0; i < 3; i++) {
      expect((await rest(server.url, "GET", `/api/gpu/instances/${id}`)).status).toBe(200);
      expect((await rest(server.url, "GET", `/api/gpu/instances/${id}/enhanced`)).status).toBe(200);
      expect((await rest(server.url, "GET", `/api/gpu/instances/${id}/cost-analysis`)).status).toBe(200);
      expect((await rest(server.url, "GET", `/api/gpu/instances/${id}/logs`)).status).toBe(200);
    }
    expect(await logs(id)).toHaveLength(count);
  });
});

describe("destroying an instance", () => {
  it("destroys once, answers the same again, and frees the offer it rented", async () => {
    const offers = await rest<{ offers: Array<{ id: string; rentable: boolean }> }>(server.url, "GET", "/api/gpu/offers?rentable=true&gpu_name=4090");
    const offerId = offers.body.offers[0]!.id;
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances", { offer_id: offerId });
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    const rentable = async () =>
      (await rest<{ offers: Array<{ id: string; rentable: boolean }> }>(server.url, "GET", "/api/gpu/offers")).body.offers.find(
        (o) => o.id === offerId,
      )!.rentable;
    expect(await rentable()).toBe(false);

    for (let i = 0; i < 2; i++) {
      const res = await rest(server.url, "DELETE", `/api/gpu/instances/${id}`);
      expect(res).toEqual({ status: 200, body: expect.objectContaining({ success: true, instance_id: id, status: "destroyed" }) });
    }
    const row = await record(id);
    expect(row.status).toBe("destroyed");
    expect(row.destroyed_at).toBeInstanceOf(Date);
    expect(await marketplace.getInstance(row.market_instance_id!)).toBeUndefined();
    expect((await logs(id)).filter((e) => e.operation === "destroy_instance")).toHaveLength(1);
    expect(await rentable()).toBe(true);
  });

  it("answers 404 for an instance that does not exist", async () => {
    const res = await rest(server.url, "DELETE", "/api/gpu/instances/gpu-999999");
    expect(res).toEqual({ status: 404, body: expect.objectContaining({ detail: "Instance 'gpu-999999' not found" }) });
  });
});

describe("the lifecycle over the generated Connect client", () => {
  it("creates, reads and destroys an instance", async () => {
    const client = gpuClient(server.url);
    const created = await client.createInstance({ templateName: "high_performance", customConfig: { llm_max_model_len: 4096 } });
    expect(created.status).toBe("creating");
    const basic = await client.getInstance({ instanceId: created.instanceId });
    expect(basic.data?.instanceId).toBe(created.instanceId);
    expect(["creating", "loading", "running"]).toContain(basic.data?.status);
    const row = await db.knex("gpu_instances").where({ instance_id: created.instanceId }).first();
    expect(row.start_command).toContain("--max-model-len 4096");
    const destroyed = await client.destroyInstance({ instanceId: created.instanceId });
    expect(destroyed).toMatchObject({ success: true, status: "destroyed" });
    const err = await client.getInstance({ instanceId: "gpu-0" }).catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.NotFound);
  });
});
