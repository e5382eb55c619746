import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveDeployment, type Deployment } from "../../../../src/gpu/deployment.js";
import { elasticsearchUrl } from "../../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../../support/postgres.js";
import { serviceGroup } from "../../../support/spawn-service.js";
import { startVastEmulator, type VastEmulator } from "../../../support/vastai/emulator.js";
import { waitFor } from "../../../support/wait.js";

// The service process SIGKILLed while vast.ai is answering its create, then started again on
// the same database: the machine rented for the dead process is adopted, no record stays
// creating, no machine of this deployment is left without a live record, and a machine labelled
// by someone else on the same account survives every round.

const API_KEY = "vast-crash-key-0123456789";
const SYNC_MS = 300;

let vast: VastEmulator;
let db: TestDatabase;
let deployment: Deployment;

const services = serviceGroup(() => ({
  DATABASE_URL: db.url,
  ELASTICSEARCH_URL: elasticsearchUrl(),
  MARKETPLACE: "vastai",
  VAST_API_KEY: API_KEY,
  VAST_API_URL: vast.url,
  VAST_MIN_INTERVAL_MS: "0",
  GPU_STATUS_SYNC_MS: String(SYNC_MS),
  GPU_CREATION_GRACE_MS: "2000",
}));
const start = () => services.start();

beforeAll(async () => {
  vast = await startVastEmulator({ apiKey: API_KEY, provisioningMs: 100, loadingMs: 100 });
  db = await createTestDatabase();
  deployment = await resolveDeployment(db.knex, undefined);
});

afterAll(async () => {
  await services.stopAll();
  await db?.drop();
  await vast?.close();
});

describe("a service killed while vast.ai answers its create", () => {
  it("leaves nothing creating and no machine of its deployment without a live record, and never touches someone else's", async () => {
    const foreign = vast.addForeignInstance("someone-else/gpu-1001");
    const person = vast.addForeignInstance("training run");
    const victim = await start();
    vast.onCreate(async () => {
      await victim.stop("SIGKILL");
    });
    const answer = await fetch(`${victim.url}/api/gpu/instances/from-template?template_name=budget`, { method: "POST" }).catch((err: unknown) => err);
    expect(answer).toBeInstanceOf(Error); // the process died before it could answer
    vast.onCreate(undefined);
    const [interrupted] = await db.knex("gpu_instances").where({ status: "creating" });
    expect(interrupted.market_instance_id).toBeNull();
    // vast.ai goes on renting the machine after the process is gone.
    const rentedFor = () => [...vast.instances.values()].find((i) => i.label === deployment.labelOf(interrupted.instance_id));
    await waitFor(() => rentedFor() !== undefined, "the machine rented for the dead process", 10_000);
    const rented = rentedFor();

    await start();
    await waitFor(async () => (await db.knex("gpu_instances").where({ status: "creating" })).length === 0, "no record creating", 20_000);
    const adopted = await db.knex("gpu_instances").where({ instance_id: interrupted.instance_id }).first();
    expect(adopted.market_instance_id).toBe(String(rented!.id));

    await new Promise((resolve) => setTimeout(resolve, SYNC_MS * 4)); // several rounds
    const live = await db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm", "exited"]);
    for (const machine of vast.instances.values()) {
      if (deployment.instanceIdOf(machine.label) === undefined) continue;
      expect(live).toContainEqual(expect.objectContaining({ market_instance_id: String(machine.id) }));
    }
    expect(vast.instances.has(foreign)).toBe(true);
    expect(vast.instances.has(person)).toBe(true);
  });
});
