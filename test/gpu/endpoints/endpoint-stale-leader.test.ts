import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { EndpointStore } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { SYNC_LEADER_LOCK_KEY } from "../../../src/gpu/lifecycle/sync-leader.js";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { waitFor } from "../helpers.js";
import { createEndpoint, deleteAndWait as deleteEndpointAndWait, eventsOf, FAST_ENDPOINT_ENV, waitForEndpoint } from "./helpers.js";

// A leader whose lock lapses in the middle of a round (a slow vast.ai search or create) must do
// nothing more that spends, and must never rent for a replica row the new leader gave up. The test
// plays the new leader: it ends the service's lock session and takes the sync lock itself, exactly
// as another process would, and gives a launch up with the store call the controller uses.

let svc: VastService;
let newLeader: pg.Client | undefined;

beforeAll(async () => {
  svc = await startVastService(
    { apiKey: "vast-stale-leader-0123456789", provisioningMs: 100, loadingMs: 100 },
    { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "100" },
  );
});

afterEach(async () => {
  svc.vast.onSearch(undefined);
  svc.vast.onCreate(undefined);
  await newLeader?.end();
  newLeader = undefined;
});

afterAll(async () => {
  await svc?.close();
});

/** Ends the service's lock session and holds the sync lock on a session of the test's, until it gets it. */
async function takeTheLead(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: svc.db.url });
  await client.connect();
  for (;;) {
    await client.query("select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'gpu-sync-leader' and datname = current_database()");
    const { rows } = await client.query<{ locked: boolean }>("select pg_try_advisory_lock($1::bigint) as locked", [SYNC_LEADER_LOCK_KEY]);
    if (rows[0]?.locked) return client;
  }
}

/** A promise that the test resolves by hand. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

const creates = () => svc.vast.requests.filter((r) => r.method === "PUT" && r.path.startsWith("/api/v0/asks/"));
const liveMachines = () => [...svc.vast.instances.values()].length;
const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("a leader whose lock lapses mid-round", () => {
  it("never rents for a replica row the new leader gave up", async () => {
    const searched = gate();
    const release = gate();
    svc.vast.onSearch(async () => {
      searched.open();
      await release.opened;
    });
    const before = creates().length;
    await createEndpoint(svc.server.url, { name: "fenced-row", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await searched.opened; // the old leader's launch waits for vast.ai's offer search
    newLeader = await takeTheLead();
    const [row] = (await svc.db.knex("gpu_endpoint_replicas").whereNull("removed_at")) as Array<{ instance_id: string }>;
    // The new leader gives the launch up: its record never came.
    expect(await EndpointStore.create({ knex: svc.db.knex }).replicas.removeUnclaimed(row!.instance_id)).toBe(true);
    svc.vast.onSearch(undefined);
    release.open();
    await settle(1000); // twenty rounds of the old leader's timers
    expect(creates().length - before).toBe(0);
    expect(liveMachines()).toBe(0);
    expect(await svc.db.knex("gpu_instances").where({ instance_id: row!.instance_id }).first()).toBeUndefined();
    // Nothing was said by a process that no longer leads.
    expect((await eventsOf(svc.server.url, "fenced-row")).map((e) => e.kind)).toEqual(["scaled"]);

    // The lead comes back: one replica, one machine.
    await newLeader.end();
    newLeader = undefined;
    await waitForEndpoint(svc.server.url, "fenced-row", "ready", (e) => e.state === "ready");
    expect(liveMachines()).toBe(1);
    expect(creates().length - before).toBe(1);
    await deleteAndWait("fenced-row");
  });

  it("launches nothing more once its lead lapsed during a slow create", async () => {
    const created = gate();
    const release = gate();
    svc.vast.onCreate(async () => {
      created.open();
      await release.opened;
    });
    const before = creates().length;
    await createEndpoint(svc.server.url, { name: "lapsed", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    await created.opened; // the first of two launches is at vast.ai
    newLeader = await takeTheLead();
    svc.vast.onCreate(undefined);
    release.open();
    await settle(1000);
    // The create under way was vast.ai's already; the round's second launch never went out.
    expect(creates().length - before).toBe(1);
    expect(liveMachines()).toBe(1);

    await newLeader.end();
    newLeader = undefined;
    await waitForEndpoint(svc.server.url, "lapsed", "two ready", (e) => e.state === "ready" && e.ready_replicas === 2);
    expect(liveMachines()).toBe(2);
    expect(creates().length - before).toBe(2);
    await deleteAndWait("lapsed");
  });
});

async function deleteAndWait(name: string): Promise<void> {
  await deleteEndpointAndWait(svc.server.url, name, svc.db.knex);
  await waitFor("no machine left at vast.ai", async () => (liveMachines() === 0 ? true : undefined));
}
