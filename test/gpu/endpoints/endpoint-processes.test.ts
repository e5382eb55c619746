import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveDeployment, type Deployment } from "../../../src/gpu/deployment.js";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { serviceGroup, type ServiceProcess } from "../../support/spawn-service.js";
import { startVastEmulator, type VastEmulator } from "../../support/vastai/emulator.js";
import { rest } from "../helpers.js";
import { createEndpoint, eventsOf, FAST_ENDPOINT_ENV, waitForEndpoint, type EndpointJson } from "./helpers.js";

// Endpoints across service processes on one database, against the vast.ai emulator: one
// controller (the sync leader) for two processes, a takeover when the leader is killed, and a
// SIGKILL in the middle of a replacement (while vast.ai answers the replacement's create) that
// converges after a restart with no duplicate and no orphan machine.

const API_KEY = "vast-endpoint-key-0123456789";

let vast: VastEmulator;
let db: TestDatabase;
let deployment: Deployment;

const services = serviceGroup(() => ({
  ...FAST_ENDPOINT_ENV,
  DATABASE_URL: db.url,
  ELASTICSEARCH_URL: elasticsearchUrl(),
  INDEX_LIVE: "false",
  MARKETPLACE: "vastai",
  VAST_API_KEY: API_KEY,
  VAST_API_URL: vast.url,
  VAST_MIN_INTERVAL_MS: "0",
  GPU_STATUS_SYNC_MS: "200",
  GPU_CREATION_GRACE_MS: "2000",
  GPU_ENDPOINT_HOLD_MS: "30000",
}));

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

/** This deployment's machines on the account that are not destroyed. */
const ourMachines = () => [...vast.instances.values()].filter((m) => deployment.instanceIdOf(m.label) !== undefined);
const machineOf = async (instanceId: string) => Number((await db.knex("gpu_instances").where({ instance_id: instanceId }).first()).market_instance_id);
const readyOf = (e: EndpointJson) => (e.instances ?? []).filter((i) => i.state === "ready").map((i) => i.instance_id);
const leads = (service: ServiceProcess) => service.logs.some((l) => l.msg === "sync leadership taken");

/** Every machine of ours has a live record of this endpoint, and each live record one machine. */
async function expectNoOrphanNoDuplicate(name: string, replicas: number): Promise<void> {
  const live = await db.knex("gpu_instances").where({ endpoint: name }).whereNotIn("status", ["destroyed", "failed"]);
  expect(live).toHaveLength(replicas);
  const machines = ourMachines().filter((m) => live.some((r: { instance_id: string }) => deployment.labelOf(r.instance_id, name) === m.label));
  expect(machines).toHaveLength(replicas);
  for (const machine of ourMachines()) {
    expect(live.map((r: { market_instance_id: string }) => r.market_instance_id)).toContain(String(machine.id));
  }
}

describe("endpoints across service processes", () => {
  it("has one controller for two processes, and the other takes over when the leader dies", async () => {
    const a = await services.start();
    const b = await services.start();
    await createEndpoint(a.url, { name: "shared", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(b.url, "shared", "ready", (e) => e.state === "ready", 30_000);
    await new Promise((resolve) => setTimeout(resolve, 500)); // a few more rounds of both processes
    const events = await eventsOf(b.url, "shared");
    expect(events.filter((e) => e.kind === "launched")).toHaveLength(2);
    await expectNoOrphanNoDuplicate("shared", 2);
    expect([leads(a), leads(b)].filter(Boolean)).toHaveLength(1);

    const [leader, follower] = leads(a) ? [a, b] : [b, a];
    await leader.stop("SIGKILL");
    const [victim, healthy] = readyOf(ready) as [string, string];
    vast.setStatus(await machineOf(victim), "exited");
    const healed = await waitForEndpoint(follower.url, "shared", "healed by the new leader", (e) => e.state === "ready" && e.instances?.length === 2 && !readyOf(e).includes(victim), 30_000);
    expect(readyOf(healed)).toContain(healthy);
    expect(leads(follower)).toBe(true);
    await expectNoOrphanNoDuplicate("shared", 2);
    expect((await rest(follower.url, "DELETE", "/api/gpu/endpoints/shared")).status).toBe(200);
    await waitForEndpoint(follower.url, "shared", "deleted", (e) => e.state === "deleted", 30_000);
    expect(ourMachines().filter((m) => m.forcedStatus !== "exited")).toEqual([]);
    await services.stopAll();
  });

  it("converges after a SIGKILL in the middle of a replacement: no duplicate, no orphan", async () => {
    const first = await services.start();
    await createEndpoint(first.url, { name: "crashy", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(first.url, "crashy", "ready", (e) => e.state === "ready", 30_000);
    const [victim] = readyOf(ready) as [string];
    vast.onCreate(async () => {
      await first.stop("SIGKILL");
    });
    vast.setStatus(await machineOf(victim), "exited");
    await first.exited;
    vast.onCreate(undefined);
    // The replacement's row and record were written before vast.ai was asked; it rents the machine anyway.
    const [interrupted] = await db.knex("gpu_instances").where({ endpoint: "crashy", status: "creating" });
    expect(interrupted).toBeDefined();
    expect(await db.knex("gpu_endpoint_replicas").where({ instance_id: interrupted.instance_id }).first()).toBeDefined();

    const second = await services.start();
    const healed = await waitForEndpoint(second.url, "crashy", "healed after the restart", (e) => e.state === "ready" && !readyOf(e).includes(victim), 30_000);
    expect(readyOf(healed)).toEqual([interrupted.instance_id]);
    await new Promise((resolve) => setTimeout(resolve, 600)); // several more rounds
    await expectNoOrphanNoDuplicate("crashy", 1);
    const kinds = (await eventsOf(second.url, "crashy")).map((e) => e.kind);
    expect(kinds.filter((k) => k === "ready")).toHaveLength(2);
  });

  it("answers the requests another process holds when the leader holding some is SIGKILLed mid-rental", async () => {
    await services.stopAll();
    const leader = await services.start();
    const other = await services.start();
    const autoscale = { min_replicas: 0, max_replicas: 1, target_in_flight: 4, scale_up_after_s: 0, scale_down_after_s: 600 };
    await createEndpoint(leader.url, { name: "held-kill", template_name: "budget", max_cost_per_hour: 5, autoscale });
    let arrived!: () => void;
    const rentalAsked = new Promise<void>((resolve) => (arrived = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    vast.onCreate(async () => {
      arrived();
      await released;
    });
    const ask = (service: ServiceProcess) =>
      fetch(`${service.url}/endpoints/held-kill/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
      }).then(
        async (res) => ({ status: res.status, body: await res.text() }),
        (err: unknown) => ({ status: 0, body: String(err) }),
      );
    const atLeader = [ask(leader), ask(leader), ask(leader)];
    const atOther = [ask(other), ask(other), ask(other)];
    await rentalAsked; // the held requests woke the endpoint; its machine is being rented
    await leader.stop("SIGKILL");
    release();
    vast.onCreate(undefined);
    // The leader's callers lose their connection with it; the other's are answered, never left hanging.
    for (const answer of await Promise.all(atLeader)) expect(answer.status).toBe(0);
    const answers = await Promise.all(atOther);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(leads(other)).toBe(true);
    // One machine, the one whose rental the dead leader asked for, adopted: no duplicate, no orphan.
    const live = (await db.knex("gpu_instances").where({ endpoint: "held-kill" }).whereNotIn("status", ["destroyed", "failed"])) as Array<{ market_instance_id: string }>;
    expect(live).toHaveLength(1);
    expect(ourMachines().filter((m) => m.label.endsWith("/held-kill")).map((m) => String(m.id))).toEqual([live[0]!.market_instance_id]);
  });
});
