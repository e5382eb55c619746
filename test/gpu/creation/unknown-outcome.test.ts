import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError } from "../../../src/errors.js";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import type { SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, type TestServer } from "../../support/server.js";
import { rest, waitFor } from "../helpers.js";

// A create whose outcome the marketplace left unknown (no answer in time, and no machine found
// under its label yet) answers 503 with the instance id, and its record stays creating: the
// reconciler adopts the machine when it shows up under the label, and fails the record when none
// has within the creation grace. Nothing billed is forgotten, no record stays creating for ever.

let db: TestDatabase;
let simulated: SimulatedMarketplace;
let server: TestServer;
/** What the next create does: rent and lose the answer, or lose the request. */
let nextCreate: "rent-then-lose-answer" | "lose-request" | undefined;

function withLostAnswers(market: SimulatedMarketplace): Marketplace {
  return {
    ...market,
    async createInstance(request, signal) {
      const fault = nextCreate;
      nextCreate = undefined;
      if (fault === "rent-then-lose-answer") await market.createInstance(request, signal);
      if (fault) throw new OutcomeUnknownError("the marketplace did not answer the create in time (injected)");
      return market.createInstance(request, signal);
    },
  };
}

beforeAll(async () => {
  db = await createTestDatabase();
  simulated = createFastSimulatedMarketplace();
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    marketplace: withLostAnswers(simulated),
    env: { GPU_STATUS_SYNC_MS: "100", GPU_CREATION_GRACE_MS: "1500" },
  });
});

afterAll(async () => {
  await server?.close();
  await simulated?.close();
  await db?.drop();
});

const record = (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();
const machinesLabelled = async (label: string) => (await simulated.listInstances("")).filter((m) => m.label === label);

describe("a create whose outcome is unknown", () => {
  it("answers 503 with the instance id; the machine rented meanwhile is adopted by its label", async () => {
    nextCreate = "rent-then-lose-answer";
    const res = await rest<{ instance_id: string; status: string; detail: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ status: "creating" });
    const id = res.body.instance_id;
    expect((await record(id)).status).toBe("creating");
    const adopted = await waitFor("adopted", async () => ((await record(id)).market_instance_id ? record(id) : undefined), 10_000);
    const machines = await machinesLabelled(adopted.market_label);
    expect(machines.map((m) => m.id)).toEqual([adopted.market_instance_id]);
    await waitFor("running", async () => (["running", "running_llm"].includes((await record(id)).status) ? true : undefined), 10_000);
    expect((await rest(server.url, "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });

  it("fails the record once the creation grace has passed with no machine under its label", async () => {
    nextCreate = "lose-request";
    const res = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(res.status).toBe(503);
    const id = res.body.instance_id;
    const failed = await waitFor("failed", async () => ((await record(id)).status === "failed" ? record(id) : undefined), 10_000);
    expect(failed.market_instance_id).toBeNull();
    expect(await machinesLabelled(failed.market_label)).toEqual([]);
    const logs = await db.knex("GpuExecutionLog").where({ instance_id: id });
    expect(logs.some((l) => l.success === false)).toBe(true);
  });
});
