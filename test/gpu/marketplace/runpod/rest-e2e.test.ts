import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LLM_MIN_CUDA } from "../../../../src/gpu/creation/templates.js";
import { createRunpodMarketplace } from "../../../../src/gpu/marketplace/runpod/runpod.js";
import type { Marketplace } from "../../../../src/gpu/marketplace/port.js";
import { createTestElasticsearch } from "../../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../../support/postgres.js";
import { startRunpodEmulator, type RunpodEmulator } from "../../../support/runpod/emulator.js";
import { startTestServer, type TestServer } from "../../../support/server.js";
import { rest, waitFor } from "../../helpers.js";

// GpuService on the RunPod adapter and its emulator, end to end through the REST API on the real
// PostgreSQL: a template's creation rents the cheapest RunPod offer that can serve it, the pod
// gets the template's CUDA floor, a direct port and the model key, and its model server serves.

const API_KEY = "rpa_e2e_key_0123456789";

let runpod: RunpodEmulator;
let db: TestDatabase;
let market: Marketplace;
let server: TestServer;

beforeAll(async () => {
  runpod = await startRunpodEmulator({ apiKey: API_KEY, provisioningMs: 150, startingMs: 150, portLagMs: 200 });
  db = await createTestDatabase();
  market = createRunpodMarketplace({ baseUrl: runpod.url, apiKey: API_KEY, timeoutMs: 2000, backoffMs: 10 });
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    marketplace: market,
    env: { GPU_STATUS_SYNC_MS: "50", GPU_PROBE_TIMEOUT_MS: "500" },
  });
});

afterAll(async () => {
  await server?.close();
  await market?.close();
  await db?.drop();
  await runpod?.close();
  expect(runpod.breaches).toEqual([]);
});

const record = (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();

describe("GpuService on RunPod through the REST API", () => {
  it("creates from a template on the cheapest RunPod offer that can serve it, serves the model, costs and destroys", async () => {
    // research: >= 16 GB per GPU, >= 40 GB in all, <= $1/h, CUDA 12.8: two Community Cloud RTX 4090s.
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=research");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    const row = await record(id);
    // $0.34 a GPU, and the model server's 100 GB of container disk at $0.10 per GB-month.
    expect(row).toMatchObject({ offer_id: "community-2x-NVIDIA_GeForce_RTX_4090", cost_per_hour: 0.693699 });

    const [create] = runpod.requests.filter((r) => r.method === "POST" && r.path === "/v2/pods");
    const body = create!.body as { name: string; gpu: unknown; args: string; ports: string[]; env: Record<string, string>; cloud: string };
    expect(body.name).toContain(id);
    expect(body.gpu).toEqual({ id: "NVIDIA GeForce RTX 4090", count: 2, minCudaVersion: String(LLM_MIN_CUDA) });
    expect(body.cloud).toBe("COMMUNITY");
    expect(body.ports).toEqual(["8000/tcp"]);
    expect(body.args).toMatch(/^Qwen\/Qwen2\.5-Coder-14B-Instruct --host 0\.0\.0\.0 --port 8000 .*--tensor-parallel-size 2$/);
    expect(body.env.VLLM_API_KEY).toMatch(/^[\w-]{43}$/);

    await waitFor("running_llm", async () => ((await record(id)).status === "running_llm" ? true : undefined), 15_000);
    const enhanced = await rest<{ data: { llm_status: { running: boolean }; basic_status: { public_ip: string } } }>(server.url, "GET", `/api/gpu/instances/${id}/enhanced`);
    expect(enhanced.body.data.llm_status.running).toBe(true);
    expect(enhanced.body.data.basic_status.public_ip).toBe("127.0.0.1");

    const cost = await rest<{ cost_per_hour: number; cost_includes: string }>(server.url, "GET", `/api/gpu/instances/${id}/cost-analysis`);
    expect(cost.body.cost_per_hour).toBeCloseTo(0.693699, 4);
    expect(cost.body.cost_includes).toMatch(/RunPod's cost over the uptime/);

    const podId = (await record(id)).market_instance_id as string;
    const destroyed = await rest<{ success: boolean; status: string }>(server.url, "DELETE", `/api/gpu/instances/${id}`);
    expect(destroyed.body).toMatchObject({ success: true, status: "destroyed" });
    expect(runpod.pods.has(podId)).toBe(false);
  });

  it("answers 409 for a RunPod offer without capacity at create time, leaving no active record", async () => {
    runpod.setStock("NVIDIA A100-SXM4-80GB", "SECURE", "LOW");
    runpod.refuseNextCreate(400);
    const refused = await rest<{ detail: string }>(server.url, "POST", "/api/gpu/instances", { offer_id: "secure-1x-NVIDIA_A100-SXM4-80GB" });
    expect(refused.status).toBe(409);
    expect(refused.body.detail).toMatch(/no longer any instances available/);
    const active = await db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"]);
    expect(active).toEqual([]);
  });
});
