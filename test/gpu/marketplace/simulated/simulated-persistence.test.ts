import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { elasticsearchUrl } from "../../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../../support/postgres.js";
import { serviceGroup, type ServiceProcess } from "../../../support/spawn-service.js";
import { waitFor } from "../../../support/wait.js";
import { rest } from "../../helpers.js";

// The simulated marketplace keeps its instances in the service's database: two processes on one
// database share them, and a process started after the others stopped resumes the instances and
// their model servers (on the same host port) instead of losing them.

let db: TestDatabase;

const services = serviceGroup(() => ({
  DATABASE_URL: db.url,
  ELASTICSEARCH_URL: elasticsearchUrl(),
  SIM_CREATING_MS: "100",
  SIM_LOADING_MS: "100",
  SIM_MODEL_SERVER_START_MS: "100",
  GPU_STATUS_SYNC_MS: "200",
}));
const start = () => services.start();

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await services.stopAll();
  await db?.drop();
});

interface Enhanced {
  data: { basic_status: { status: string }; llm_status: { running: boolean; port: number }; db_info: { status: string } };
}

const enhanced = async (service: ServiceProcess, id: string) => (await rest<Enhanced>(service.url, "GET", `/api/gpu/instances/${id}/enhanced`)).body.data;

describe("the simulated marketplace in the service's database", () => {
  it("is shared by two processes, and resumed with its model servers after every process stopped", async () => {
    const first = await start();
    const created = await rest<{ instance_id: string }>(first.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    await waitFor(async () => (await enhanced(first, id)).llm_status.running, "running_llm in the first process", 20_000);
    const port = (await enhanced(first, id)).llm_status.port;

    const second = await start();
    expect(await enhanced(second, id)).toMatchObject({ basic_status: { status: "running" }, llm_status: { running: true, port } });
    const other = await rest<{ instance_id: string }>(second.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(other.status).toBe(200);
    await waitFor(async () => (await enhanced(first, other.body.instance_id)).basic_status.status === "running", "the second's instance seen by the first", 20_000);

    await first.stop("SIGKILL");
    await second.stop("SIGTERM");
    const third = await start();
    for (const instance of [id, other.body.instance_id]) {
      await waitFor(async () => (await enhanced(third, instance)).llm_status.running, `${instance} serving again`, 20_000);
    }
    expect((await enhanced(third, id)).llm_status.port).toBe(port);
    const statuses = await db.knex("gpu_instances").select("status");
    expect(statuses.map((r) => r.status)).toEqual(["running_llm", "running_llm"]);
    expect(await db.knex("sim_market_instances").count({ n: "*" })).toEqual([{ n: "2" }]);
  });
});
