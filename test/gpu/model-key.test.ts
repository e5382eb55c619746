import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { captureLogLines } from "../support/log-lines.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTokenFile } from "../support/token-file.js";
import { waitFor } from "./helpers.js";

// Every model-serving instance runs its model server with a key of its own, on the simulated
// marketplace as on the others: /v1/... refuses a caller without it (401), /health stays open, the
// service's probe sends it and still sees the model serving. The key is answered once by the
// create and then only to gpu:write by GET .../model-key; no list, status or log answer, and no
// log line, carries it.

const provisioner = { name: "provisioner", secret: "prov-secret", scopes: ["gpu:read", "gpu:write"] };
const reader = { name: "dashboard", secret: "dash-secret", scopes: ["gpu:read"] };

let db: TestDatabase;
let server: TestServer;
let tokenFile: ReturnType<typeof createTokenFile>;
const logs = captureLogLines("debug");

beforeAll(async () => {
  db = await createTestDatabase();
  tokenFile = createTokenFile([provisioner, reader]);
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    env: { AUTH_TOKENS_FILE: tokenFile.path, GPU_STATUS_SYNC_MS: "50", GPU_STATUS_CACHE_MS: "0" },
    logger: logs.logger,
  });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
  tokenFile?.remove();
});

async function call(method: string, path: string, secret = provisioner.secret, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}
const json = (answer: { text: string }) => JSON.parse(answer.text) as Record<string, unknown>;
const record = (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();

async function modelServerUrl(id: string): Promise<string> {
  const enhanced = json(await call("GET", `/api/gpu/instances/${id}/enhanced`)).data as { llm_status: { port: number }; basic_status: { public_ip: string } };
  return `http://${enhanced.basic_status.public_ip}:${enhanced.llm_status.port}`;
}

describe("a model-serving instance on the simulated marketplace", () => {
  let id = "";
  let key = "";

  it("answers its key once in the creation response", async () => {
    const created = await call("POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    ({ instance_id: id, model_api_key: key } = json(created) as { instance_id: string; model_api_key: string });
    expect(key).toMatch(/^[A-Za-z0-9_-]{43}$/); // 32 random bytes
    expect((await record(id)).model_api_key).toBe(key);
  });

  it("serves /v1/... only with its key, /health to anyone, and the probe still sees it running_llm", async () => {
    await waitFor("running_llm", async () => ((await record(id)).status === "running_llm" ? true : undefined), 15_000);
    const url = await modelServerUrl(id);
    expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${url}/v1/models`, { headers: { authorization: "Bearer not-the-key" } })).status).toBe(401);
    expect((await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${server.url}` } })).status).toBe(401);
    expect((await fetch(`${url}/health`)).status).toBe(200);
    const models = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(models.status).toBe(200);
    expect(((await models.json()) as { data: Array<{ id: string }> }).data[0]!.id).toBe("Qwen/Qwen2.5-Coder-7B-Instruct");
    const enhanced = json(await call("GET", `/api/gpu/instances/${id}/enhanced`)).data as { llm_status: { running: boolean } };
    expect(enhanced.llm_status.running).toBe(true);
  });

  it("gives the key back to gpu:write only, on REST and Connect", async () => {
    const answer = await call("GET", `/api/gpu/instances/${id}/model-key`);
    expect(answer.status).toBe(200);
    expect(json(answer)).toEqual({ instance_id: id, model_api_key: key });
    const refused = await call("GET", `/api/gpu/instances/${id}/model-key`, reader.secret);
    expect(refused.status).toBe(403);
    expect(json(refused).detail).toMatch(/needs scope gpu:write$/);
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${provisioner.secret}`);
      return next(req);
    };
    const client = createClient(GpuService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [bearer] }));
    expect((await client.getModelKey({ instanceId: id })).modelApiKey).toBe(key);
    expect((await call("GET", "/api/gpu/instances/gpu-999999/model-key")).status).toBe(404);
  });

  it("never shows the key in list, status, cost, log or statistics answers, nor in a log line", async () => {
    const answers = await Promise.all(
      ["/api/gpu/instances", `/api/gpu/instances/${id}`, `/api/gpu/instances/${id}/enhanced`, `/api/gpu/instances/${id}/cost-analysis`, `/api/gpu/instances/${id}/logs`, "/api/gpu/statistics"].map((path) =>
        call("GET", path, reader.secret),
      ),
    );
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.text).not.toContain(key);
    }
    const logRows = await db.knex("GpuExecutionLog").where({ instance_id: id });
    expect(JSON.stringify(logRows)).not.toContain(key);
    expect((await record(id)).start_command).not.toContain(key);
    expect(logs.lines.length).toBeGreaterThan(0);
    expect(JSON.stringify(logs.lines)).not.toContain(key);
  });

  it("keeps an instance created before keys (no stored key) running_llm, and says it has no key", async () => {
    // Before keys, a record had none and its server took none: the probe falls back to /health.
    await db.knex("gpu_instances").where({ instance_id: id }).update({ model_api_key: null });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await record(id)).status).toBe("running_llm");
    const none = await call("GET", `/api/gpu/instances/${id}/model-key`);
    expect(none.status).toBe(404);
    expect(json(none)).toMatchObject({ code: "NO_MODEL_KEY", detail: expect.stringMatching(/created before model-server keys/) });
  });

  it("has no key for an instance without a model server", async () => {
    const offers = json(await call("POST", "/api/gpu/search-offers", reader.secret, { rentable: true, limit: 1 })).offers as Array<{ id: string }>;
    const created = await call("POST", "/api/gpu/instances", provisioner.secret, { offer_id: offers[0]!.id });
    expect(created.status).toBe(200);
    expect(json(created).model_api_key).toBeUndefined();
    const none = await call("GET", `/api/gpu/instances/${json(created).instance_id as string}/model-key`);
    expect(none.status).toBe(404);
    expect(json(none).detail).toMatch(/runs no model server/);
  });
});
