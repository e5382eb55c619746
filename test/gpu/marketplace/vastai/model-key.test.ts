import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { VastEmulator } from "../../../support/vastai/emulator.js";
import type { TestDatabase } from "../../../support/postgres.js";
import type { TestServer } from "../../../support/server.js";
import { startVastService, type VastService } from "../../../support/vastai/service.js";
import { rest, waitFor } from "../../helpers.js";

// On vast.ai the model server's key travels in the create's env (VLLM_API_KEY, which vLLM reads as
// --api-key); the emulator's model server demands it as vLLM does. The key reaches the machine,
// never its label nor its start command, and the probe still sees the model serving.

let vast: VastEmulator;
let db: TestDatabase;
let service: VastService;
let server: TestServer;

beforeAll(async () => {
  service = await startVastService({ apiKey: "vast-key-model-key-test", provisioningMs: 200, loadingMs: 200, minIntervalMs: 10 }, {
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

describe("MARKETPLACE=vastai model-server keys", () => {
  it("sends the key in the create's env, the model server refuses callers without it, and the probe sees it running_llm", async () => {
    const created = await rest<{ instance_id: string; model_api_key: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const { instance_id: id, model_api_key: key } = created.body;
    expect(key).toMatch(/^[A-Za-z0-9_-]{43}$/);

    const create = vast.requests.find((r) => r.method === "PUT" && r.path.startsWith("/api/v0/asks/"))!;
    expect((create.body as { env: Record<string, string> }).env.VLLM_API_KEY).toBe(key);
    expect(JSON.stringify((create.body as { args: string[] }).args)).not.toContain(key);
    const machine = vast.instances.get(Number((await record(id)).market_instance_id))!;
    expect(machine.label).not.toContain(key);

    await waitFor("running_llm", async () => ((await record(id)).status === "running_llm" ? true : undefined), 15_000);
    const enhanced = await rest<{ data: { llm_status: { port: number }; basic_status: { public_ip: string } } }>(server.url, "GET", `/api/gpu/instances/${id}/enhanced`);
    const url = `http://${enhanced.body.data.basic_status.public_ip}:${enhanced.body.data.llm_status.port}`;
    expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${url}/health`)).status).toBe(200);
    expect((await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);

    // vast.ai shows the env to the account (extra_env); the service's own answers never carry it.
    for (const path of ["/api/gpu/instances", `/api/gpu/instances/${id}`, `/api/gpu/instances/${id}/enhanced`, `/api/gpu/instances/${id}/logs`]) {
      const answer = await fetch(`${server.url}${path}`);
      expect(await answer.text(), path).not.toContain(key);
    }
    expect((await rest(server.url, "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  }, 30_000);
});
