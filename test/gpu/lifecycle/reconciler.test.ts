import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveDeployment, type Deployment } from "../../../src/gpu/deployment.js";
import type { SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, type TestServer } from "../../support/server.js";
import { rest, waitFor } from "../helpers.js";
import { HOUR } from "../seed.js";

// Nothing rented is forgotten: a creation interrupted between the marketplace call and the
// database update, a labelled marketplace instance with no record, and a creating record whose
// marketplace instance never appeared are all repaired by the reconciler, at start-up and in the loop.
// Machines labelled by anybody else (another deployment, a person) are never touched.

let db: TestDatabase;
let marketplace: SimulatedMarketplace;
let deployment: Deployment;
const servers: TestServer[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  marketplace = createFastSimulatedMarketplace();
  deployment = await resolveDeployment(db.knex, undefined);
});

afterAll(async () => {
  for (const server of servers) await server.close();
  await marketplace?.close();
  await db?.drop();
});

async function start(env: Record<string, string>, crashAfterMarketplaceCreate = false): Promise<TestServer> {
  const server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    marketplace,
    env,
    gpuCreationHooks: crashAfterMarketplaceCreate
      ? {
          afterMarketplaceCreate() {
            throw new Error("process died between the marketplace call and the database update");
          },
        }
      : undefined,
  });
  servers.push(server);
  return server;
}

const record = async (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();
const logsOf = (id: string) => db.knex("GpuExecutionLog").where({ instance_id: id }).orderBy("id");

async function rentable(): Promise<string> {
  return (await marketplace.listOffers()).find((o) => o.rentable && o.dphTotal < 0.3)!.id;
}

describe("the reconciler", () => {
  it("repairs an interrupted creation, destroys an unowned labelled instance and fails a creation that never reached the marketplace", async () => {
    const crashed = await start({ GPU_STATUS_SYNC_MS: "86400000" }, true);
    const res = await rest(crashed.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(res.status).toBe(500);
    const [interrupted] = await db.knex("gpu_instances").where({ status: "creating" });
    expect(interrupted.market_instance_id).toBeNull();
    const [leaked] = (await marketplace.listInstances("")).filter((m) => m.label === deployment.labelOf(interrupted.instance_id));
    expect(leaked).toBeDefined();
    await crashed.close();
    servers.pop();
    // A restart takes a while: by then the leaked instance has left `creating` at the marketplace,
    // so the record adopted at start-up takes its status (the sync loop is off in this test).
    await waitFor("the leaked instance to leave creating", async () =>
      (await marketplace.getInstance(leaked!.id))?.status !== "creating" ? true : undefined,
    );

    // A labelled instance no record owns, and a record whose creation never reached the marketplace.
    const orphan = await marketplace.createInstance({ offerId: await rentable(), label: deployment.labelOf("gpu-990001"), image: "x", startCommand: "", env: {} });
    // Machines of the same account that are not this deployment's.
    const foreign = [
      await marketplace.createInstance({ offerId: await rentable(), label: "dffffffffffff/gpu-990001", image: "x", startCommand: "", env: {} }),
      await marketplace.createInstance({ offerId: await rentable(), label: "gpu-990005", image: "x", startCommand: "", env: {} }),
      await marketplace.createInstance({ offerId: await rentable(), label: "alice's notebook", image: "x", startCommand: "", env: {} }),
    ];
    await db.knex("gpu_instances").insert({
      instance_id: "gpu-990002",
      offer_id: "o",
      status: "creating",
      created_at: new Date(Date.now() - HOUR),
      updated_at: new Date(Date.now() - HOUR),
    });

    const restarted = await start({ GPU_STATUS_SYNC_MS: "86400000", GPU_CREATION_GRACE_MS: "60000" });
    expect(restarted).toBeDefined();

    const adopted = await record(interrupted.instance_id);
    expect(adopted.market_instance_id).toBe(leaked!.id);
    expect(adopted.cost_per_hour).toBe(leaked!.dphTotal);
    const creations = (await logsOf(interrupted.instance_id)).filter((l) => l.operation === "create_instance");
    expect(creations).toEqual([expect.objectContaining({ success: true })]);

    expect(await marketplace.getInstance(orphan.id)).toBeUndefined();
    for (const machine of foreign) expect(await marketplace.getInstance(machine.id)).toBeDefined();
    expect(await logsOf("gpu-990001")).toEqual([expect.objectContaining({ operation: "reconcile_destroy", success: true })]);

    expect((await record("gpu-990002")).status).toBe("failed");
    expect(await logsOf("gpu-990002")).toEqual([expect.objectContaining({ operation: "create_instance", success: false })]);

    // No marketplace instance without a record that owns it, and no record left creating.
    const records = await db.knex("gpu_instances").select("instance_id", "market_instance_id", "status");
    for (const market of await marketplace.listInstances(`${deployment.id}/`)) {
      expect(records).toContainEqual(expect.objectContaining({ instance_id: deployment.instanceIdOf(market.label), market_instance_id: market.id }));
    }
    for (const machine of foreign) await marketplace.destroyInstance(machine.id);
    await waitFor("no record creating", async () =>
      (await db.knex("gpu_instances").where({ status: "creating" })).length === 0 ? true : undefined,
    );
  });

  it("leaves a creation in flight alone, and reconciles in the loop, not only at start", async () => {
    // A marketplace that takes 300 ms to answer a creation: meanwhile the record is creating with
    // no marketplace instance, which the loop (every 50 ms, no grace) would fail if it did not
    // know the creation is in flight.
    const slow = {
      ...marketplace,
      createInstance: async (...args: Parameters<SimulatedMarketplace["createInstance"]>) => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        return marketplace.createInstance(...args);
      },
    };
    // One sync leader per database: the servers of the previous test step down first.
    for (const previous of servers.splice(0)) await previous.close();
    const server = await startTestServer({
      knex: db.knex,
      elasticsearch: createTestElasticsearch(),
      marketplace: slow,
      env: { GPU_STATUS_SYNC_MS: "50", GPU_CREATION_GRACE_MS: "0" },
    });
    servers.push(server);
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    expect((await record(created.body.instance_id)).status).not.toBe("failed");
    expect(await logsOf(created.body.instance_id)).toEqual([expect.objectContaining({ operation: "create_instance", success: true })]);

    const orphan = await marketplace.createInstance({ offerId: await rentable(), label: deployment.labelOf("gpu-990003"), image: "x", startCommand: "", env: {} });
    await waitFor("orphan destroyed", async () => ((await marketplace.getInstance(orphan.id)) ? undefined : true));
  });

  it("releases an interrupted creation whose machine rents above the creation's price cap instead of adopting it", async () => {
    for (const previous of servers.splice(0)) await previous.close();
    const crashed = await start({ GPU_STATUS_SYNC_MS: "86400000" }, true);
    expect((await rest(crashed.url, "POST", "/api/gpu/instances/from-template?template_name=budget")).status).toBe(500);
    await crashed.close();
    servers.pop();
    const [interrupted] = await db.knex("gpu_instances").where({ status: "creating" }).whereNull("market_instance_id");
    const [leaked] = (await marketplace.listInstances("")).filter((m) => m.label === deployment.labelOf(interrupted.instance_id));
    expect(interrupted.price_cap).toBe(0.5); // the template's max_price
    // As an endpoint's replica would be: a cap tighter than the price the machine rents at.
    await db.knex("gpu_instances").where({ instance_id: interrupted.instance_id }).update({ price_cap: leaked!.dphTotal / 2 });

    await start({ GPU_STATUS_SYNC_MS: "86400000", GPU_CREATION_GRACE_MS: "60000" });
    expect(await record(interrupted.instance_id)).toMatchObject({ status: "failed" });
    expect(await marketplace.getInstance(leaked!.id)).toBeUndefined();
    const creation = (await logsOf(interrupted.instance_id)).find((l) => l.operation === "create_instance");
    expect(creation).toMatchObject({ success: false });
    expect(creation.result).toContain("above the creation's cap");
  });
});
