import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { gpuClient, rest } from "./helpers.js";
import { HOUR, seedInstances, type SeedInstance } from "./seed.js";

// The instance list: filter, the three sort keys, keyset pagination with opaque tokens, bounds.

let db: TestDatabase;
let server: TestServer;
const now = Date.now();
const STATUSES = ["running", "destroyed", "exited", "running_llm", "failed"];

// 25 records: distinct creation times, costs that repeat (ties are broken by id), and uptimes
// that do not follow creation order because some instances were destroyed early.
const seeded: SeedInstance[] = Array.from({ length: 25 }, (_, n) => ({
  id: `gpu-${2000 + n}`,
  status: STATUSES[n % STATUSES.length]!,
  gpuName: n % 2 ? "RTX 4090" : "L4",
  costPerHour: [0.2, 0.45, 1.1][n % 3]!,
  createdAt: new Date(now - (n + 1) * HOUR),
  destroyedAt: STATUSES[n % STATUSES.length] === "destroyed" ? new Date(now - (n + 1) * HOUR + (n % 4) * 600_000) : undefined,
}));

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { GPU_STATUS_SYNC_MS: "86400000" } });
  await seedInstances(db.knex, seeded);
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
});

interface Page {
  instances: Array<{ instance_id: string; status: string; uptime: string; total_cost: number; created_at: string; destroyed_at?: string }>;
  count: number;
  next_page_token: string;
}

async function allPages(query: string, limit: number): Promise<{ ids: string[]; pages: Page[] }> {
  const pages: Page[] = [];
  let token = "";
  do {
    const res = await rest<Page>(server.url, "GET", `/api/gpu/instances?${query}&limit=${limit}${token ? `&page_token=${token}` : ""}`);
    expect(res.status).toBe(200);
    pages.push(res.body);
    token = res.body.next_page_token;
  } while (token);
  return { ids: pages.flatMap((p) => p.instances.map((i) => i.instance_id)), pages };
}

const uptime = (i: SeedInstance) => (i.destroyedAt?.getTime() ?? Date.now()) - i.createdAt.getTime();
const byDesc = (key: (i: SeedInstance) => number) => (a: SeedInstance, b: SeedInstance) => key(b) - key(a) || b.id.localeCompare(a.id);

describe("GET /api/gpu/instances", () => {
  it("pages through every record newest first, each exactly once, with count over all pages", async () => {
    const { ids, pages } = await allPages("sort_by=created_at", 10);
    expect(pages.map((p) => p.instances.length)).toEqual([10, 10, 5]);
    expect(pages.every((p) => p.count === 25)).toBe(true);
    expect(ids).toEqual([...seeded].sort(byDesc((i) => i.createdAt.getTime())).map((i) => i.id));
  });

  it("sorts by cost_per_hour, highest first, ties by id", async () => {
    const { ids } = await allPages("sort_by=cost_per_hour", 7);
    expect(ids).toEqual([...seeded].sort(byDesc((i) => i.costPerHour)).map((i) => i.id));
  });

  it("sorts by uptime, longest first, counting destroyed instances only to destroyed_at", async () => {
    const { ids } = await allPages("sort_by=uptime", 4);
    expect(ids).toEqual([...seeded].sort(byDesc(uptime)).map((i) => i.id));
  });

  it("filters by status and counts the matches", async () => {
    const { ids, pages } = await allPages("status_filter=destroyed", 2);
    const expected = seeded.filter((i) => i.status === "destroyed");
    expect(ids.sort()).toEqual(expected.map((i) => i.id).sort());
    expect(pages[0]!.count).toBe(expected.length);
    const destroyed = pages[0]!.instances[0]!;
    expect(destroyed.destroyed_at).toMatch(/Z$/);
    const running = (await rest<Page>(server.url, "GET", "/api/gpu/instances?status_filter=running&limit=1")).body.instances[0]!;
    expect(running).not.toHaveProperty("destroyed_at");
  });

  it("reports uptime as H:MM:SS and total cost from the stored times", async () => {
    const res = await rest<Page>(server.url, "GET", "/api/gpu/instances?status_filter=destroyed&sort_by=created_at&limit=1");
    const item = res.body.instances[0]!;
    const record = seeded.find((i) => i.id === item.instance_id)!;
    const ms = uptime(record);
    const hms = `${Math.floor(ms / HOUR)}:${String(Math.floor((ms % HOUR) / 60_000)).padStart(2, "0")}:${String(Math.floor((ms % 60_000) / 1000)).padStart(2, "0")}`;
    expect(item.uptime).toBe(hms);
    expect(item.total_cost).toBeCloseTo((record.costPerHour * ms) / HOUR, 4);
  });

  it.each([
    ["status_filter=sleeping", "status_filter"],
    ["sort_by=name", "sort_by"],
    ["limit=0", "limit"],
    ["limit=1001", "limit"],
    ["page_token=not-a-token", "page_token"],
  ])("answers 400 for %s", async (query, field) => {
    const res = await rest(server.url, "GET", `/api/gpu/instances?${query}`);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ field });
  });

  it("refuses a token from another listing, and a forged one", async () => {
    const first = await rest<Page>(server.url, "GET", "/api/gpu/instances?sort_by=created_at&limit=3");
    const other = await rest(server.url, "GET", `/api/gpu/instances?sort_by=uptime&limit=3&page_token=${first.body.next_page_token}`);
    expect(other.status).toBe(400);
    const forged = Buffer.from(JSON.stringify([1, "created_at", "", new Date().toISOString(), ["'; drop table x", "gpu-1"]])).toString("base64url");
    expect((await rest(server.url, "GET", `/api/gpu/instances?page_token=${forged}`)).status).toBe(400);
  });

  it("pages over the generated Connect client", async () => {
    const client = gpuClient(server.url);
    const first = await client.listInstances({ limit: 20 });
    const second = await client.listInstances({ limit: 20, pageToken: first.nextPageToken });
    expect(first.instances).toHaveLength(20);
    expect(second.instances).toHaveLength(5);
    expect(second.nextPageToken).toBe("");
    expect(first.instances[0]!.createdAt).toBeDefined();
    const err = await client.listInstances({ statusFilter: "nope" }).catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
  });
});
