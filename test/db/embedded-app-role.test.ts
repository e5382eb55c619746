import { rmSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { startEmbeddedPostgres } from "../../src/db/embedded/embedded-postgres.js";
import { createKnex, migrateToLatest } from "../../src/db/knex.js";
import { embeddedFixtures, query, queryRows } from "../support/embedded-postgres.js";

// The service reaches the embedded PostgreSQL as an application role that owns the schema and
// can do nothing a superuser can (no shell through COPY ... TO PROGRAM); the server does not see
// the service's secrets; a DATA_DIR of an earlier version, whose objects the superuser owns, is
// handed to that role at its next start.

const fixtures = embeddedFixtures();
afterAll(() => fixtures.cleanup());

/** Everything in the public schema, with its owner. */
const OWNERS_SQL = `
  select c.relname as name, pg_get_userbyid(c.relowner) as owner from pg_class c join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'S')
  union all
  select p.proname, pg_get_userbyid(p.proowner) from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public'
  union all
  select 'schema public', pg_get_userbyid(nspowner) from pg_namespace where nspname = 'public'
  union all
  select 'database postgres', pg_get_userbyid(datdba) from pg_database where datname = 'postgres'`;

/** The lines a program run by the server (as the superuser may) writes. */
async function programOutput(adminUrl: string, program: string): Promise<string[]> {
  const client = new pg.Client(adminUrl);
  await client.connect();
  try {
    await client.query("create temporary table seen (line text)");
    await client.query(`copy seen from program ${client.escapeLiteral(program)}`);
    return (await client.query<{ line: string }>("select line from seen")).rows.map((r) => r.line);
  } finally {
    await client.end();
  }
}

describe("the embedded PostgreSQL's roles", () => {
  it("gives the service a role that owns its schema and is no superuser, and keeps the superuser's URL apart", async () => {
    const started = await startEmbeddedPostgres(fixtures.dataDir());
    const knex = createKnex(started.url, { poolMax: 2 });
    try {
      await migrateToLatest(knex);
      expect(await query(started.url, "select current_user as name, rolsuper as super from pg_roles where rolname = current_user")).toEqual({
        name: "app",
        super: false,
      });
      await expect(query(started.url, "copy (select 1) to program 'true'")).rejects.toThrow(/permission denied|must be superuser/i);
      const owners = await queryRows(started.url, OWNERS_SQL);
      expect(owners.length).toBeGreaterThan(10);
      expect(owners.filter((o) => o.owner !== "app")).toEqual([]);
      expect(await query(started.adminUrl, "select rolsuper as super from pg_roles where rolname = current_user")).toEqual({ super: true });
    } finally {
      await knex.destroy();
      await started.stop();
    }
  }, 120_000);

  it("runs the server without the service's environment: its secrets never reach a program the server runs", async () => {
    const saved = { VAST_API_KEY: process.env.VAST_API_KEY, AUTH_TOKENS: process.env.AUTH_TOKENS };
    process.env.VAST_API_KEY = "vast-key-that-must-stay-home";
    process.env.AUTH_TOKENS = "token-that-must-stay-home";
    let started;
    try {
      started = await startEmbeddedPostgres(fixtures.dataDir());
    } finally {
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
    try {
      // The superuser can run programs; what they see is the server's environment.
      const lines = await programOutput(started.adminUrl, "env");
      expect(lines.some((line) => line.startsWith("PATH="))).toBe(true);
      expect(lines.filter((line) => /VAST_API_KEY|AUTH_TOKENS|must-stay-home/.test(line))).toEqual([]);
    } finally {
      await started.stop();
    }
  }, 120_000);

  it("hands the objects of an earlier version's DATA_DIR (owned by the superuser, no role yet) to the service's role at the next start", async () => {
    const dir = fixtures.dataDir();
    const first = await startEmbeddedPostgres(dir);
    // What an earlier version left: no application role, and a schema the superuser migrated and filled.
    const admin = createKnex(first.adminUrl, { poolMax: 1 });
    try {
      await admin.raw("alter database postgres owner to postgres; alter schema public owner to pg_database_owner; drop owned by app; drop role app");
      await migrateToLatest(admin);
      await admin.raw(`insert into "PR_GOODS_SEARCH_INTF" ("GOODS_NO", "GOODS_NM", "SALE_PRICE", "USE_YN", "INDEX_YN") values ('0000000001', 'kept', 10, 'Y', 'N')`);
      expect(await query(first.adminUrl, OWNERS_SQL.split("union all")[0]!)).toMatchObject({ owner: "postgres" });
    } finally {
      await admin.destroy();
      await first.stop();
    }
    rmSync(join(dir, "postgres", "embedded-app-password"), { force: true });

    for (let start = 0; start < 2; start++) {
      const next = await startEmbeddedPostgres(dir);
      const knex = createKnex(next.url, { poolMax: 2 });
      try {
        await migrateToLatest(knex);
        expect((await queryRows(next.url, OWNERS_SQL)).filter((o) => o.owner !== "app")).toEqual([]);
        expect(await knex("PR_GOODS_SEARCH_INTF").count({ n: "*" }).first()).toEqual({ n: String(1 + start) });
        await knex("PR_GOODS_SEARCH_INTF").insert({ GOODS_NO: `000000010${start}`, GOODS_NM: "added", SALE_PRICE: 1, USE_YN: "Y", INDEX_YN: "N" });
        await knex.raw("select nextval('gpu_instance_id_seq')");
      } finally {
        await knex.destroy();
        await next.stop();
      }
    }
  }, 180_000);
});
