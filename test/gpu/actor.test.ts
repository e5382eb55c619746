import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTokenFile } from "../support/token-file.js";
import { waitFor } from "./helpers.js";

// Every execution log row names its actor: the token's name for a create and a destroy (REST and
// Connect alike), `system` for what the sync loop does on its own (status changes, auto-destroy),
// `anonymous` with auth off. The REST and RPC log answers show it.

const provisioner = { name: "provisioner", secret: "prov-secret", scopes: ["gpu:read", "gpu:write"] };
const cleaner = { name: "cleaner", secret: "clean-secret", scopes: ["gpu:write"] };

let db: TestDatabase;
let server: TestServer;
let tokenFile: ReturnType<typeof createTokenFile>;

beforeAll(async () => {
  db = await createTestDatabase();
  tokenFile = createTokenFile([provisioner, cleaner]);
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    env: { AUTH_TOKENS_FILE: tokenFile.path, GPU_STATUS_SYNC_MS: "50" },
  });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
  tokenFile?.remove();
});

const auth = (secret: string) => ({ authorization: `Bearer ${secret}`, "content-type": "application/json" });

async function createInstance(customConfig: Record<string, unknown> = {}): Promise<string> {
  const res = await fetch(`${server.url}/api/gpu/instances/from-template?template_name=budget`, {
    method: "POST",
    headers: auth(provisioner.secret),
    body: JSON.stringify({ custom_config: customConfig }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { instance_id: string }).instance_id;
}

type RestLog = { operation: string; actor: string; success: boolean };
async function restLogs(id: string): Promise<RestLog[]> {
  const res = await fetch(`${server.url}/api/gpu/instances/${id}/logs`, { headers: auth(provisioner.secret) });
  expect(res.status).toBe(200);
  return ((await res.json()) as { logs: RestLog[] }).logs;
}

function bearer(secret: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${secret}`);
    return next(req);
  };
}
const client = (secret: string) => createClient(GpuService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [bearer(secret)] }));

describe("the actor on execution log rows", () => {
  it("is the token's name on a create (REST) and a destroy (Connect), and system on the sync loop's status changes", async () => {
    const id = await createInstance();
    await waitFor("a status change", async () => ((await restLogs(id)).some((l) => l.operation === "status_change") ? true : undefined));
    await client(cleaner.secret).destroyInstance({ instanceId: id });

    const logs = await restLogs(id);
    expect(logs.find((l) => l.operation === "create_instance")).toMatchObject({ actor: "provisioner", success: true });
    expect(logs.find((l) => l.operation === "destroy_instance")).toMatchObject({ actor: "cleaner", success: true });
    const changes = logs.filter((l) => l.operation === "status_change");
    expect(changes.length).toBeGreaterThan(0);
    expect(new Set(changes.map((l) => l.actor))).toEqual(new Set(["system"]));

    // The RPC answer carries the same field.
    const rpc = await client(provisioner.secret).listInstanceLogs({ instanceId: id });
    expect(rpc.logs.map((l) => [l.operation, l.actor])).toEqual(logs.map((l) => [l.operation, l.actor]));
  });

  it("is system on an auto-destroy by the sync loop", async () => {
    const id = await createInstance({ max_hours: 0.5 / 3600 });
    const autoDestroy = await waitFor("the auto_destroy record", async () => (await restLogs(id)).find((l) => l.operation === "auto_destroy"), 15_000);
    expect(autoDestroy).toMatchObject({ actor: "system", success: true });
    expect((await restLogs(id)).find((l) => l.operation === "create_instance")?.actor).toBe("provisioner");
  });

  it("reads unknown on rows written before actors were recorded", async () => {
    const id = await createInstance();
    await db.knex.raw(`insert into "GpuExecutionLog" (instance_id, operation, command, result, success) values (?, 'status_change', 'sync', 'old row', true)`, [id]);
    expect((await restLogs(id))[0]).toMatchObject({ operation: "status_change", actor: "unknown" });
  });
});

describe("the actor with auth off", () => {
  it("is anonymous", async () => {
    const open = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { GPU_STATUS_SYNC_MS: "86400000" } });
    try {
      const res = await fetch(`${open.url}/api/gpu/instances/from-template?template_name=budget`, { method: "POST" });
      const { instance_id: id } = (await res.json()) as { instance_id: string };
      const logs = (await (await fetch(`${open.url}/api/gpu/instances/${id}/logs`)).json()) as { logs: RestLog[] };
      expect(logs.logs.find((l) => l.operation === "create_instance")?.actor).toBe("anonymous");
    } finally {
      await open.close();
    }
  });
});
