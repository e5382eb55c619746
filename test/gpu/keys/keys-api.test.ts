import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { secretDigest } from "../../../src/server/keys/key-secret.js";
import { useTestServer } from "../../support/server.js";
import { gpuClient, rest } from "../helpers.js";

// The key resource's contract on the real PostgreSQL, over REST and the typed Connect client:
// validation (400 naming the field, nothing written), 409 on a live name, 404, secrets shown
// once and stored as digests, PATCH with update_mask semantics, rotation, idempotent revocation,
// and the usage read summed from the minutes table.

const ctx = useTestServer();

type KeyJson = {
  name: string;
  key?: string;
  key_prefix: string;
  endpoints?: string[];
  max_budget?: number;
  budget_duration?: string;
  rpm_limit?: number;
  tpm_limit?: number;
  max_parallel_requests?: number;
  expires_at?: string;
  created_at: string;
  revoked_at?: string;
  period: { starts_at: string; resets_at?: string; spend?: number; requests?: string; prompt_tokens?: string; completion_tokens?: string };
  in_flight?: number;
  detail?: string;
  field?: string;
};

const post = (body: unknown) => rest<KeyJson>(ctx.server.url, "POST", "/api/gpu/keys", body);
const keyRows = async () => Number(((await ctx.db.knex("gpu_keys").count({ n: "*" }).first()) as { n: string }).n);

describe("key resource", () => {
  it.each([
    ["name", { name: "Upper" }],
    ["name", { name: "-starts-with-dash" }],
    ["name", { name: `a${"b".repeat(63)}` }],
    ["name", { name: "" }],
    ["name", { name: "system" }],
    ["endpoints", { name: "k", endpoints: ["Not An Endpoint"] }],
    ["max_budget", { name: "k", max_budget: 0 }],
    ["max_budget", { name: "k", max_budget: -1 }],
    ["budget_duration", { name: "k", budget_duration: "2d" }],
    ["rpm_limit", { name: "k", rpm_limit: 0 }],
    ["tpm_limit", { name: "k", tpm_limit: -5 }],
    ["max_parallel_requests", { name: "k", max_parallel_requests: 0 }],
    ["expires_at", { name: "k", expires_at: "2020-01-01T00:00:00Z" }],
  ])("answers 400 naming %s and writes nothing", async (field, body) => {
    const res = await post(body);
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
    expect(res.body.detail).toBeTruthy();
    expect(await keyRows()).toBe(0);
  });

  it("answers 400 for a body of the wrong type", async () => {
    expect((await post({ name: "k", rpm_limit: "many" })).status).toBe(400);
    expect((await post({ name: "k", rpm_limit: 1.5 })).status).toBe(400);
    expect((await post("not json")).status).toBe(400);
    expect(await keyRows()).toBe(0);
  });

  it("answers junk on every route with a 4xx, never a 500, and writes nothing", async () => {
    const junk: unknown[] = [
      { name: "x".repeat(100_000) },
      { name: "k", endpoints: "chat" },
      { name: "k", endpoints: [1, 2] },
      { name: "k", endpoints: Array.from({ length: 101 }, (_, i) => `e${i}`) },
      { name: "k", max_budget: 1e300 },
      { name: "k", max_budget: "NaN" },
      { name: "k", rpm_limit: 2 ** 40 },
      { name: "k", expires_at: "not a time" },
      { name: "k", budget_duration: "" },
      [],
      null,
    ];
    for (const body of junk) {
      const res = await post(body);
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
    }
    for (const [method, path, body] of [
      ["PATCH", "/api/gpu/keys/k", { update_mask: "name" }],
      ["PATCH", "/api/gpu/keys/k", { rpm_limit: -1 }],
      ["POST", "/api/gpu/keys/k/rotate", { grace_s: "soon" }],
      ["GET", `/api/gpu/keys/${"%ff".repeat(50)}/usage?window=${"w".repeat(5000)}`, undefined],
      ["GET", "/api/gpu/keys/k/usage?endpoint=%00", undefined],
    ] as const) {
      const res = await rest(ctx.server.url, method, path, body);
      expect(res.status, `${method} ${path.slice(0, 60)}`).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
    }
    expect(await keyRows()).toBe(0);
  });

  it("creates a key whose secret is shown once and stored only as its SHA-256", async () => {
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const created = await post({ name: "team-a", endpoints: ["chat"], rpm_limit: 60, tpm_limit: 10000, max_parallel_requests: 4, budget_duration: "1d", expires_at: expires });
    expect(created.status).toBe(200);
    const secret = created.body.key!;
    expect(secret).toMatch(/^sk-[A-Za-z0-9_-]{43}$/);
    expect(created.body).toMatchObject({
      name: "team-a",
      key_prefix: secret.slice(0, 8),
      endpoints: ["chat"],
      rpm_limit: 60,
      tpm_limit: 10000,
      max_parallel_requests: 4,
      budget_duration: "1d",
      period: { starts_at: created.body.created_at },
    });
    expect(Date.parse(created.body.period.resets_at!) - Date.parse(created.body.created_at)).toBe(86_400_000);
    const row = await ctx.db.knex("gpu_keys").where({ name: "team-a" }).first();
    expect(row.secret_sha256).toEqual(secretDigest(secret));
    expect(JSON.stringify(row)).not.toContain(secret.slice(3));
    const read = await rest<KeyJson>(ctx.server.url, "GET", "/api/gpu/keys/team-a");
    expect(read.status).toBe(200);
    expect(read.body.key).toBeUndefined();
    expect(read.body.key_prefix).toBe(secret.slice(0, 8));
    const list = await rest<{ keys: KeyJson[] }>(ctx.server.url, "GET", "/api/gpu/keys");
    expect(list.body.keys.map((k) => [k.name, k.key])).toEqual([["team-a", undefined]]);
  });

  it("refuses a second live key of a name with 409, and takes the name again once it is revoked", async () => {
    expect((await post({ name: "dup" })).status).toBe(200);
    const again = await post({ name: "dup" });
    expect(again.status).toBe(409);
    expect(again.body.detail).toContain("dup");
    const revoked = await rest<KeyJson>(ctx.server.url, "DELETE", "/api/gpu/keys/dup");
    expect(revoked.status).toBe(200);
    expect(revoked.body.revoked_at).toBeTruthy();
    // Idempotent: the same revocation time.
    const twice = await rest<KeyJson>(ctx.server.url, "DELETE", "/api/gpu/keys/dup");
    expect(twice.body.revoked_at).toBe(revoked.body.revoked_at);
    expect((await post({ name: "dup" })).status).toBe(200);
    expect((await rest<KeyJson>(ctx.server.url, "GET", "/api/gpu/keys/dup")).body.revoked_at).toBeUndefined();
  });

  it("reads in_flight summed over the fresh load rows of every process, the live key's when a revoked one shares its name", async () => {
    for (const name of ["busy", "idle", "reused"]) expect((await post({ name })).status).toBe(200);
    expect((await rest<KeyJson>(ctx.server.url, "DELETE", "/api/gpu/keys/reused")).status).toBe(200);
    expect((await post({ name: "reused" })).status).toBe(200);
    const row = (processId: string, endpointId: number, byCaller: Record<string, number>) => ({ process_id: processId, endpoint_id: endpointId, by_caller: JSON.stringify(byCaller) });
    await ctx.db.knex("gpu_endpoint_load").insert([
      row("in-flight-x", 1, { busy: 2, reused: 1 }),
      row("in-flight-x", 2, { busy: 1 }),
      row("in-flight-y", 1, { busy: 1, "AUTH_TOKENS#1": 5 }),
      // A process gone for a minute: not counted.
      { ...row("in-flight-z", 1, { busy: 10, idle: 10 }), updated_at: new Date(Date.now() - 60_000) },
    ]);
    try {
      expect((await rest<KeyJson>(ctx.server.url, "GET", "/api/gpu/keys/busy")).body.in_flight).toBe(4);
      expect((await rest<KeyJson>(ctx.server.url, "GET", "/api/gpu/keys/idle")).body.in_flight ?? 0).toBe(0);
      const { keys } = (await rest<{ keys: KeyJson[] }>(ctx.server.url, "GET", "/api/gpu/keys")).body;
      const listed = keys.filter((key) => ["busy", "idle", "reused"].includes(key.name)).map((key) => [key.name, key.revoked_at === undefined, key.in_flight ?? 0]);
      expect(listed).toEqual([
        ["busy", true, 4],
        ["idle", true, 0],
        ["reused", false, 0],
        ["reused", true, 1],
      ]);
    } finally {
      await ctx.db.knex("gpu_endpoint_load").whereLike("process_id", "in-flight-%").delete();
    }
  });

  it("serves names with dots and underscores on every route", async () => {
    expect((await post({ name: "team.a_1" })).status).toBe(200);
    expect((await rest(ctx.server.url, "GET", "/api/gpu/keys/team.a_1")).status).toBe(200);
    expect((await rest(ctx.server.url, "PATCH", "/api/gpu/keys/team.a_1", { rpm_limit: 3 })).status).toBe(200);
    expect((await rest(ctx.server.url, "POST", "/api/gpu/keys/team.a_1/rotate", {})).status).toBe(200);
    expect((await rest(ctx.server.url, "GET", "/api/gpu/keys/team.a_1/usage")).status).toBe(200);
    expect((await rest(ctx.server.url, "DELETE", "/api/gpu/keys/team.a_1")).status).toBe(200);
  });

  it("answers 404 for an unknown key on every route", async () => {
    for (const [method, path] of [
      ["GET", "/api/gpu/keys/nope"],
      ["PATCH", "/api/gpu/keys/nope"],
      ["POST", "/api/gpu/keys/nope/rotate"],
      ["DELETE", "/api/gpu/keys/nope"],
      ["GET", "/api/gpu/keys/nope/usage"],
    ] as const) {
      const body = method === "PATCH" ? { rpm_limit: 1 } : method === "POST" ? {} : undefined;
      expect((await rest(ctx.server.url, method, path, body)).status, `${method} ${path}`).toBe(404);
    }
  });

  it("patches the fields named, clears those named null, and validates", async () => {
    await post({ name: "patchy", rpm_limit: 10, endpoints: ["a", "b"] });
    const patch = (body: unknown) => rest<KeyJson>(ctx.server.url, "PATCH", "/api/gpu/keys/patchy", body);
    expect((await patch({})).body.field).toBe("update_mask");
    expect((await patch({ tpm_limit: 0 })).body.field).toBe("tpm_limit");
    expect((await patch({ budget_duration: "1w" })).body.field).toBe("budget_duration");
    expect((await patch({ expires_at: "2001-01-01T00:00:00Z" })).body.field).toBe("expires_at");
    const changed = await patch({ tpm_limit: 500, endpoints: ["c"] });
    expect(changed).toMatchObject({ status: 200, body: { rpm_limit: 10, tpm_limit: 500, endpoints: ["c"] } });
    const cleared = await patch({ rpm_limit: null, endpoints: [] });
    expect(cleared.status).toBe(200);
    expect(cleared.body.rpm_limit).toBeUndefined();
    expect(cleared.body.endpoints ?? []).toEqual([]);
    expect(cleared.body.tpm_limit).toBe(500);
  });

  it("refuses a budget on an endpoint without a token price, and allows it once priced", async () => {
    const endpoint = { name: "priced-later", template_name: "budget", replicas: 0, max_cost_per_hour: 1 };
    expect((await rest(ctx.server.url, "POST", "/api/gpu/endpoints", endpoint)).status).toBe(200);
    const refused = await post({ name: "budgeted", max_budget: 5, endpoints: ["priced-later"] });
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe("endpoints");
    expect(refused.body.detail).toContain("priced-later");
    await rest(ctx.server.url, "PATCH", "/api/gpu/endpoints/priced-later", { token_price: { input_per_mtok: 0.5, output_per_mtok: 1.5 } });
    const created = await post({ name: "budgeted", max_budget: 5, endpoints: ["priced-later"] });
    expect(created).toMatchObject({ status: 200, body: { max_budget: 5 } });
    expect((await ctx.db.knex("gpu_keys").where({ name: "budgeted" }).first()).max_budget_micros).toBe("5000000");
  });

  it("rotates a secret: a new one shown once, the old digest kept for its grace only", async () => {
    const first = (await post({ name: "rotor" })).body.key!;
    for (const grace_s of [-1, 86_401]) {
      const bad = await rest<KeyJson>(ctx.server.url, "POST", "/api/gpu/keys/rotor/rotate", { grace_s });
      expect(bad.status).toBe(400);
      expect(bad.body.field).toBe("grace_s");
    }
    expect((await rest(ctx.server.url, "POST", "/api/gpu/keys/rotor/rotate", { grace_s: 1.5 })).status).toBe(400);
    const rotated = await rest<KeyJson>(ctx.server.url, "POST", "/api/gpu/keys/rotor/rotate", { grace_s: 60 });
    expect(rotated.status).toBe(200);
    const second = rotated.body.key!;
    expect(second).toMatch(/^sk-/);
    expect(second).not.toBe(first);
    expect(rotated.body.key_prefix).toBe(second.slice(0, 8));
    const row = await ctx.db.knex("gpu_keys").where({ name: "rotor" }).first();
    expect(row.secret_sha256).toEqual(secretDigest(second));
    expect(row.previous_sha256).toEqual(secretDigest(first));
    expect(row.previous_valid_until.getTime() - Date.now()).toBeGreaterThan(55_000);
    await rest(ctx.server.url, "POST", "/api/gpu/keys/rotor/rotate", {});
    const after = await ctx.db.knex("gpu_keys").where({ name: "rotor" }).first();
    expect(after.previous_sha256).toBeNull();
  });

  it("reads usage a minute apart over 24 h, an hour apart over 7 d, bounded by the window, and the period's totals", async () => {
    await post({ name: "user" });
    const minute = (msAgo: number) => new Date(Math.floor((Date.now() - msAgo) / 60_000) * 60_000);
    const row = (endpoint: string, at: Date, n: number, refused: Record<string, number> = {}) => ({
      key_name: "user",
      endpoint_name: endpoint,
      minute: at,
      requests: n,
      prompt_tokens: 100 * n,
      completion_tokens: 10 * n,
      spend_micros: 1500 * n,
      machine_cost_micros: 700 * n,
      refused: JSON.stringify(refused),
    });
    const recent = minute(5 * 60_000);
    await ctx.db.knex("gpu_key_usage_minutes").insert([
      row("chat", recent, 2, { rpm_limit: 3 }),
      row("code", recent, 1, { rpm_limit: 1, tpm_limit: 2 }),
      row("chat", minute(2 * 3_600_000), 4),
      row("chat", minute(3 * 86_400_000), 8),
      row("chat", minute(30 * 86_400_000), 16),
    ]);
    type Usage = { points: Array<{ at: string; requests: string; prompt_tokens: string; spend: number; machine_cost: number; refused?: Record<string, string> }> };
    const usage = (query: string) => rest<Usage>(ctx.server.url, "GET", `/api/gpu/keys/user/usage${query}`);
    const hour = await usage("?window=1h");
    expect(hour.body.points).toEqual([
      { at: recent.toISOString().replace(".000Z", "Z"), requests: "3", prompt_tokens: "300", completion_tokens: "30", spend: 0.0045, machine_cost: 0.0021, refused: { rpm_limit: "4", tpm_limit: "2" } },
    ]);
    const day = await usage("");
    expect(day.body.points.map((p) => p.requests)).toEqual(["4", "3"]);
    const chatOnly = await usage("?window=24h&endpoint=chat");
    expect(chatOnly.body.points.map((p) => p.requests)).toEqual(["4", "2"]);
    const week = await usage("?window=7d");
    expect(week.body.points.map((p) => p.requests)).toEqual(["8", "4", "3"]);
    for (const point of week.body.points) expect(new Date(point.at).getUTCMinutes()).toBe(0);
    expect((await usage("?window=2h")).body).toMatchObject({ field: "window" });
    expect((await usage("?endpoint=Bad")).body).toMatchObject({ field: "endpoint" });
    // Without budget_duration the period is the key's whole life: the usage since its creation.
    await ctx.db.knex("gpu_keys").where({ name: "user" }).update({ created_at: new Date(Date.now() - 10 * 60_000) });
    const key = await rest<KeyJson>(ctx.server.url, "GET", "/api/gpu/keys/user");
    expect(key.body.period).toMatchObject({ requests: "3", prompt_tokens: "300", completion_tokens: "30", spend: 0.0045 });
  });

  it("serves the typed client with the same rules, 429 past 1,000 live keys", async () => {
    const client = gpuClient(ctx.server.url);
    const created = await client.createKey({ name: "typed", endpoints: ["chat"], rpmLimit: 5 });
    expect(created.key).toMatch(/^sk-/);
    expect((await client.getKey({ name: "typed" })).key).toBeUndefined();
    const err = await client.createKey({ name: "typed" }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.Aborted);
    const updated = await client.updateKey({ name: "typed", rpmLimit: 7 });
    expect(updated.rpmLimit).toBe(7);
    const rotated = await client.rotateKey({ name: "typed" });
    expect(rotated.key).not.toBe(created.key);
    expect((await client.getKeyUsage({ name: "typed" })).points).toEqual([]);
    expect((await client.deleteKey({ name: "typed" })).revokedAt).toBeDefined();
    expect((await client.listKeys({})).keys.length).toBeGreaterThan(0);

    const live = Number(((await ctx.db.knex("gpu_keys").whereNull("revoked_at").count({ n: "*" }).first()) as { n: string }).n);
    await ctx.db.knex("gpu_keys").insert(
      Array.from({ length: 1000 - live }, (_, i) => ({ name: `bulk-${i}`, secret_sha256: secretDigest(`bulk-${i}`), key_prefix: "sk-bulk" })),
    );
    const over = await post({ name: "one-too-many" });
    expect(over.status).toBe(429);
    expect(over.body.detail).toContain("1000");
    expect(await ctx.db.knex("gpu_keys").where({ name: "one-too-many" }).first()).toBeUndefined();
    await rest(ctx.server.url, "DELETE", "/api/gpu/keys/bulk-0");
    expect((await post({ name: "one-too-many" })).status).toBe(200);
  });
});
