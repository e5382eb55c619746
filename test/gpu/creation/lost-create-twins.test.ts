import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKnex } from "../../../src/db/knex.js";
import { createSeveralMarkets } from "../../../src/gpu/marketplace/markets/several-markets.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { runpodOn } from "../../support/runpod/adapter.js";
import { startRunpodEmulator, type RunpodEmulator } from "../../support/runpod/emulator.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { rest, waitFor } from "../helpers.js";

// Twins of a lost create are settled against the database's record, across service instances on
// one database, each with its own RunPod adapter. The creating one loses the answer of its first
// create (524 after the pod was rented) and, RunPod listing the pod late, sends it again; while
// the second answer is on its way, the sync leader (the other one) sees the first pod and adopts
// it. The pod the record names is kept; the second is given back; the creation answers success.

const API_KEY = "rpa_twins_0123456789";
const OFFER = "community-1x-NVIDIA_GeForce_RTX_4090";
const ENV = { MARKETPLACE: "runpod", RUNPOD_API_KEY: API_KEY, GPU_STATUS_SYNC_MS: "100", GPU_CREATION_GRACE_MS: "60000" };

let runpod: RunpodEmulator;
let db: TestDatabase;
let leader: TestServer;
let creator: TestServer;
const closers: Array<() => Promise<unknown>> = [];

/** One service instance on the shared database: its own pool, its own RunPod adapter, its own sync loop. */
async function startInstance(): Promise<TestServer> {
  const knex = createKnex(db.url, { poolMax: 5 });
  const adapter = runpodOn(runpod, API_KEY, { timeoutMs: 15_000, createLookupMs: 200, backoffMs: 100 });
  const marketplace = createSeveralMarkets({ markets: [{ name: "runpod", marketplace: adapter }], timeoutMs: 15_000, logger: pino({ level: "silent" }) });
  const server = await startTestServer({ knex, elasticsearch: createTestElasticsearch(), marketplace, env: { ...ENV, RUNPOD_API_URL: runpod.url } });
  closers.push(async () => {
    await server.close();
    await marketplace.close();
    await knex.destroy();
  });
  return server;
}

const leads = async (server: TestServer) => /^gpu_sync_leader 1$/m.test(await (await fetch(`${server.url}/metrics`)).text());

beforeAll(async () => {
  runpod = await startRunpodEmulator({ apiKey: API_KEY, provisioningMs: 100, startingMs: 100 });
  db = await createTestDatabase();
  leader = await startInstance();
  await waitFor("the first instance leads", async () => ((await leads(leader)) ? true : undefined), 10_000);
  creator = await startInstance();
});

afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await db?.drop();
  await runpod?.close();
  expect(runpod.breaches).toEqual([]);
});

describe("twins of a lost create, with two service instances on one database", () => {
  it("keep the pod the leader adopted for the record; the resend's pod is given back and the creation answers success", async () => {
    expect(await leads(creator)).toBe(false);
    const creates = () => runpod.requests.filter((r) => r.method === "POST" && r.path === "/v2/pods");
    runpod.listLag(2_000);
    runpod.failCreatesAfterRenting(1, 524);
    // The resend rents at once and answers long after RunPod lists the first pod.
    runpod.onCreate(() => creates().length === 2 && runpod.answerCreatesAfter(6_000));

    const res = await rest<{ instance_id: string }>(creator.url, "POST", "/api/gpu/instances", { offer_id: OFFER, template_name: "budget" });
    expect(res.status).toBe(200);
    expect(creates()).toHaveLength(2);
    const id = res.body.instance_id;
    const podsOfLabel = () => [...runpod.pods.values()].filter((p) => p.name.endsWith(id)).map((p) => p.id);
    const named = await db.knex("gpu_instances").where({ instance_id: id }).first();
    expect(named.status).not.toBe("failed");
    expect(podsOfLabel()).toEqual([named.market_instance_id]);
    // The other pod of the label, the resend's, was deleted (by the creator, or by the leader's reconciler first).
    const deleted = runpod.requests.filter((r) => r.method === "DELETE").map((r) => r.path.replace("/v2/pods/", ""));
    expect(deleted).toHaveLength(deleted.length > 0 ? deleted.length : 1);
    expect(deleted).not.toContain(named.market_instance_id);
    const log = await db.knex("GpuExecutionLog").where({ instance_id: id, operation: "destroy_instance" }).first();
    expect(log.result).toMatch(/twin of the record's machine/);

    runpod.listLag(0);
    await waitFor("the record's pod running", async () => {
      const record = await db.knex("gpu_instances").where({ instance_id: id }).first();
      return ["running", "running_llm"].includes(record.status) ? record : undefined;
    }, 15_000);
    expect(podsOfLabel()).toEqual([named.market_instance_id]);
  });
});
