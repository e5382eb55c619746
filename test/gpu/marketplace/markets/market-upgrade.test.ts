import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QUICK_MARKET_ENV } from "../../../support/markets/market-service.js";
import { createTestDatabase, type TestDatabase } from "../../../support/postgres.js";
import { startRunpodEmulator, type RunpodEmulator } from "../../../support/runpod/emulator.js";
import { spawnService, type ServiceProcess } from "../../../support/spawn-service.js";
import { startVastEmulator, type VastEmulator } from "../../../support/vastai/emulator.js";
import { createEndpoint, FAST_ENDPOINT_ENV, readyIds, waitForEndpoint } from "../../endpoints/helpers.js";
import { rest, waitFor } from "../../helpers.js";
import type { Market } from "./markets-api.js";

// The upgrade as a user makes it: the service on MARKETPLACE=vastai with live instances and an
// endpoint, restarted (a real process, over the same database) on vastai,runpod, then
// runpod,vastai, then vastai again, with both emulators up throughout. Nothing is destroyed, every
// status and destroy call goes to the market the record names, a record from before markets were
// named is named by the market that lists its machine, and a RunPod record kept while RunPod is no
// longer configured shows as unconfigured. The ids callers hold (instance_id) answer throughout.

const VAST_KEY = "vast-upgrade-key";
const RUNPOD_KEY = "rpa_upgrade_0123456789";

let vast: VastEmulator;
let runpod: RunpodEmulator;
let db: TestDatabase;
let service: ServiceProcess | undefined;

beforeAll(async () => {
  vast = await startVastEmulator({ apiKey: VAST_KEY, provisioningMs: 150, loadingMs: 150 });
  runpod = await startRunpodEmulator({ apiKey: RUNPOD_KEY, provisioningMs: 150, startingMs: 150, portLagMs: 150 });
  db = await createTestDatabase();
});

afterAll(async () => {
  await service?.stop("SIGKILL");
  await db?.drop();
  await runpod?.close();
  await vast?.close();
  expect(runpod.breaches).toEqual([]);
});

/** Stops the running service (as a deployment would) and starts it again on `marketplace`. */
async function restartOn(marketplace: string): Promise<string> {
  await service?.stop("SIGTERM");
  console.log(`restart on MARKETPLACE=${marketplace}`);
  service = await spawnService({
    ...QUICK_MARKET_ENV,
    ...FAST_ENDPOINT_ENV,
    GPU_STATUS_SYNC_MS: "100",
    DATABASE_URL: db.url,
    MARKETPLACE: marketplace,
    VAST_API_KEY: VAST_KEY,
    VAST_API_URL: vast.url,
    RUNPOD_API_KEY: RUNPOD_KEY,
    RUNPOD_API_URL: runpod.url,
  });
  return service.url;
}

const record = (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const vastIds = () => new Set([...vast.instances.keys()].map(String));

/** Every instance call each emulator was asked: vast.ai only of its machines, RunPod only of its pods, and neither destroyed anything. */
function expectCallsToTheirMarkets(): void {
  expect(vast.requests.filter((r) => r.method === "DELETE")).toEqual([]);
  expect(runpod.requests.filter((r) => r.method === "DELETE")).toEqual([]);
  const vastAsked = vast.requests.flatMap((r) => /\/instances\/(\w+)/.exec(r.path)?.[1] ?? []);
  expect(vastAsked.filter((id) => !vastIds().has(id))).toEqual([]);
  const runpodAsked = runpod.requests.flatMap((r) => /^\/v2\/pods\/([^/]+)/.exec(r.path)?.[1] ?? []);
  expect(runpodAsked.filter((id) => !runpod.pods.has(id))).toEqual([]);
}

async function expectStillUp(url: string, ids: Record<string, string>): Promise<void> {
  await sleep(1_000); // ten sync rounds, the first (the start's reconciliation) among them
  for (const [id, status] of Object.entries(ids)) {
    expect((await record(id)).status, id).toBe(status);
    const basic = await rest<{ data: { instance_id: string; market: string } }>(url, "GET", `/api/gpu/instances/${id}`);
    expect(basic.status, id).toBe(200);
  }
  const destroys = await db.knex("GpuExecutionLog").whereIn("operation", ["reconcile_destroy", "destroy_instance", "auto_destroy"]);
  expect(destroys).toEqual([]);
  expectCallsToTheirMarkets();
}

describe("upgrading from one market to two and back", () => {
  it("destroys, adopts and misroutes nothing over vastai, vastai,runpod, runpod,vastai and vastai again", async () => {
    let url = await restartOn("vastai");
    const plain = (await rest<{ instance_id: string }>(url, "POST", "/api/gpu/instances/from-template?template_name=budget")).body.instance_id;
    await createEndpoint(url, { name: "upgrade", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const [replica] = readyIds(await waitForEndpoint(url, "upgrade", "ready", (e) => e.state === "ready", 30_000)) as [string];
    await waitFor("running_llm", async () => ((await record(plain)).status === "running_llm" ? true : undefined), 20_000);
    expect(await record(plain)).toMatchObject({ market: "vastai" });
    const vastMachine = (await record(plain)).market_instance_id as string;
    // As a record written before records named their market: a bare id, market empty.
    await db.knex("gpu_instances").where({ instance_id: plain }).update({ market: null });

    url = await restartOn("vastai,runpod");
    await expectStillUp(url, { [plain]: "running_llm", [replica]: "running_llm" });
    // The market that lists its machine under its id named it.
    expect(await record(plain)).toMatchObject({ market: "vastai", market_instance_id: vastMachine });
    const pod = await rest<{ instance_id: string }>(url, "POST", "/api/gpu/instances", { offer_id: "runpod:community-1x-NVIDIA_GeForce_RTX_4090" });
    expect(pod.status).toBe(200);
    const onRunpod = pod.body.instance_id;
    await waitFor("running on RunPod", async () => ((await record(onRunpod)).status === "running" ? true : undefined), 20_000);
    expect(await record(onRunpod)).toMatchObject({ market: "runpod" });

    url = await restartOn("runpod,vastai");
    await expectStillUp(url, { [plain]: "running_llm", [replica]: "running_llm", [onRunpod]: "running" });
    expect(readyIds(await waitForEndpoint(url, "upgrade", "ready", (e) => e.state === "ready", 10_000))).toEqual([replica]);

    // Another record as from before records named their market: a start on one market names it.
    await service!.stop("SIGTERM");
    await db.knex("gpu_instances").where({ instance_id: replica }).update({ market: null });
    url = await restartOn("vastai");
    expect(await record(replica)).toMatchObject({ market: "vastai" });
    const runpodCalls = runpod.requests.length; // the last process on RunPod has stopped
    await expectStillUp(url, { [plain]: "running_llm", [replica]: "running_llm", [onRunpod]: "running" });
    // RunPod is not configured: nothing is asked of it, its record keeps its status and is shown, and said once.
    expect(runpod.requests.length).toBe(runpodCalls);
    const markets = (await rest<{ markets: Market[] }>(url, "GET", "/api/gpu/markets")).body.markets;
    expect(markets.map((m) => [m.name, m.state])).toEqual([
      ["vastai", "ok"],
      ["runpod", "unconfigured"],
    ]);
    expect(markets[1]!.instances.map((i) => [i.instance_id, i.status])).toEqual([[onRunpod, "running"]]);
    const basic = await rest<{ data: { market: string; status: string } }>(url, "GET", `/api/gpu/instances/${onRunpod}`);
    expect(basic.body.data).toMatchObject({ market: "runpod", status: "running" });
    expect(service!.logs.filter((l) => l.instance_id === onRunpod && /market is not configured/.test(String(l.msg)))).toHaveLength(1);
    expect(readyIds(await waitForEndpoint(url, "upgrade", "ready", (e) => e.state === "ready", 10_000))).toEqual([replica]);
    console.log(
      `upgrade: ${await db.knex("gpu_instances").count("* as n").first().then((r) => r?.n)} records, ` +
        `vast.ai asked ${vast.requests.length} calls, RunPod ${runpod.requests.length}, destroys asked 0`,
    );
  }, 300_000);
});
