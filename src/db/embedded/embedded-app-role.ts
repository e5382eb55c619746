import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import pg from "pg";

// The service connects to the embedded PostgreSQL as an application role that owns its database
// and schema, not as the superuser: a superuser can run shell commands through
// `COPY ... TO PROGRAM`, so any SQL injection would reach the shell. Every start makes sure of it
// as the superuser, idempotently, so that a DATA_DIR of an earlier version (whose objects the
// superuser created and owns) changes hands at its first start under this version.

export const APP_ROLE = "app";
const DATABASE = "postgres";

/** Kinds of relation and the ALTER that changes their owner (indexes follow their table). */
const RELATION_KINDS: Record<string, string> = { r: "table", p: "table", v: "view", m: "materialized view", f: "foreign table" };

/** Creates the role if needed, sets its password and hands it the database, the schema and everything in it. */
export async function ensureAppRole(adminUrl: string, passwordFile: string): Promise<string> {
  const password = appPassword(passwordFile);
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query("begin");
    const { rowCount } = await client.query("select 1 from pg_roles where rolname = $1", [APP_ROLE]);
    if (!rowCount) await client.query(`create role ${APP_ROLE}`);
    await client.query(`alter role ${APP_ROLE} with login nosuperuser nocreatedb nocreaterole noreplication nobypassrls password ${client.escapeLiteral(password)}`);
    await client.query(`alter database ${DATABASE} owner to ${APP_ROLE}`);
    await client.query(`alter schema public owner to ${APP_ROLE}`);
    await handOverObjects(client);
    await client.query("commit");
  } catch (err) {
    await client.query("rollback").catch(() => {});
    throw err;
  } finally {
    await client.end();
  }
  return password;
}

/** The role's password, generated once and kept beside the superuser's (mode 600). */
function appPassword(file: string): string {
  if (!existsSync(file)) writeFileSync(file, `${randomBytes(24).toString("base64url")}\n`, { mode: 0o600, flag: "wx" });
  return readFileSync(file, "utf8").trim();
}

/** Objects of the schema that another role (an earlier version's superuser) owns. */
async function handOverObjects(client: pg.Client): Promise<void> {
  const owned = `pg_get_userbyid(%s) <> '${APP_ROLE}'`;
  const relations = await client.query<{ kind: string; name: string }>(
    `select c.relkind as kind, format('%I.%I', n.nspname, c.relname) as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'f') and ${owned.replace("%s", "c.relowner")}`,
  );
  for (const { kind, name } of relations.rows) await client.query(`alter ${RELATION_KINDS[kind]} ${name} owner to ${APP_ROLE}`);
  // Sequences of a table's column changed hands with their table; the others go one by one.
  const sequences = await client.query<{ name: string }>(
    `select format('%I.%I', n.nspname, c.relname) as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind = 'S' and ${owned.replace("%s", "c.relowner")}`,
  );
  for (const { name } of sequences.rows) await client.query(`alter sequence ${name} owner to ${APP_ROLE}`);
  const routines = await client.query<{ signature: string }>(
    `select p.oid::regprocedure::text as signature from pg_proc p join pg_namespace n on n.oid = p.pronamespace
     where n.nspname = 'public' and ${owned.replace("%s", "p.proowner")}`,
  );
  for (const { signature } of routines.rows) await client.query(`alter routine ${signature} owner to ${APP_ROLE}`);
  const types = await client.query<{ kind: string; name: string }>(
    `select t.typtype as kind, format('%I.%I', n.nspname, t.typname) as name from pg_type t join pg_namespace n on n.oid = t.typnamespace
     where n.nspname = 'public' and t.typtype in ('e', 'd', 'r') and ${owned.replace("%s", "t.typowner")}`,
  );
  for (const { kind, name } of types.rows) await client.query(`alter ${kind === "d" ? "domain" : "type"} ${name} owner to ${APP_ROLE}`);
}
