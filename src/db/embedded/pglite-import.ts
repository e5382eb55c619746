import { existsSync, renameSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Knex } from "knex";
import type { Logger } from "pino";
import { messageOf } from "../../errors.js";
import { createKnex, migrateToLatest } from "../knex.js";

// Earlier versions kept the embedded database in DATA_DIR/pglite (PGlite, PostgreSQL compiled to
// WebAssembly, one connection at a time). Its rows, GPU instances that may still be billed among
// them, are copied into the embedded PostgreSQL at its first start, in one transaction: a start
// that dies half-way copies everything again the next time. Only then is the folder renamed to
// pglite.imported, kept for the operator to delete.

const SKIPPED = new Set(["knex_migrations", "knex_migrations_lock"]);
const ROWS_PER_STATEMENT = 2_000;

export function pgliteDirOf(dataDir: string): string {
  return join(resolve(dataDir), "pglite");
}

/** Copies DATA_DIR/pglite into `target` (migrated) if it is there; returns the rows copied per table. */
export async function importPgliteData(dataDir: string, target: Knex, logger: Logger): Promise<Record<string, number> | undefined> {
  const source = pgliteDirOf(dataDir);
  if (!existsSync(source)) return undefined;
  logger.warn({ from: source }, "importing the earlier embedded database (PGlite) into the embedded PostgreSQL");
  const { PGlite } = await import("@electric-sql/pglite");
  const db = await PGlite.create(source);
  try {
    await migrateSource(db);
    const copied = await target.transaction(async (trx) => {
      // A copy, not new writes: foreign keys and triggers were checked when the rows were written.
      await trx.raw("set local session_replication_role = replica");
      const tables = (await tablesOf(trx)).filter((t) => !SKIPPED.has(t));
      const present = new Set((await db.query<{ name: string }>(TABLES_SQL)).rows.map((r) => r.name));
      await trx.raw(`truncate ${tables.map((t) => `"${t}"`).join(", ")}`);
      const counts: Record<string, number> = {};
      for (const table of tables.filter((t) => present.has(t))) counts[table] = await copyTable(db, trx, table);
      await copySequences(db, trx);
      return counts;
    });
    await db.close();
    renameSync(source, `${source}.imported`);
    logger.warn({ copied, kept: `${source}.imported` }, "imported the earlier embedded database; its folder is kept, delete it once satisfied");
    return copied;
  } catch (err) {
    await db.close().catch(() => {});
    throw new Error(`importing the earlier embedded database (${source}) failed, nothing was changed: ${messageOf(err)}`, { cause: err });
  }
}

type PGliteDb = import("@electric-sql/pglite").PGlite;

const TABLES_SQL = `select table_name as name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE' order by 1`;

async function tablesOf(knex: Knex | Knex.Transaction): Promise<string[]> {
  const { rows } = await knex.raw<{ rows: { name: string }[] }>(TABLES_SQL);
  return rows.map((r) => r.name);
}

/** Brings the old database to the same schema first, through PGlite's own socket server. */
async function migrateSource(db: PGliteDb): Promise<void> {
  const { PGLiteSocketServer } = await import("@electric-sql/pglite-socket");
  const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0 });
  await server.start();
  const knex = createKnex(`postgres://postgres@${server.getServerConn()}/postgres`, { poolMax: 1 });
  try {
    await migrateToLatest(knex);
  } finally {
    await knex.destroy();
    await server.stop();
  }
}

/** Rows travel as JSON text, which PostgreSQL reads back into every column type exactly. */
async function copyTable(db: PGliteDb, trx: Knex.Transaction, table: string): Promise<number> {
  const { rows: columns } = await trx.raw<{ rows: { name: string }[] }>(
    `select attname as name from pg_attribute where attrelid = ?::regclass and attnum > 0 and not attisdropped and attgenerated = '' order by attnum`,
    [`"${table}"`],
  );
  const list = columns.map((c) => `"${c.name}"`).join(", ");
  let copied = 0;
  await db.transaction(async (tx) => {
    await tx.query(`declare rows_out no scroll cursor for select row_to_json(t)::text as j from "${table}" t`);
    for (;;) {
      const { rows } = await tx.query<{ j: string }>(`fetch ${ROWS_PER_STATEMENT} from rows_out`);
      if (rows.length === 0) break;
      await trx.raw(`insert into "${table}" (${list}) overriding system value select ${list} from json_populate_recordset(null::"${table}", ?::json)`, [
        `[${rows.map((r) => r.j).join(",")}]`,
      ]);
      copied += rows.length;
    }
  });
  return copied;
}

/** Every sequence goes on where it stood (ids are never given twice), owned by a column or not. */
async function copySequences(db: PGliteDb, trx: Knex.Transaction): Promise<void> {
  const { rows } = await db.query<{ name: string; last_value: string | null; start_value: string }>(
    `select format('%I.%I', schemaname, sequencename) as name, last_value::text, start_value::text from pg_sequences where schemaname = 'public'`,
  );
  for (const { name, last_value, start_value } of rows) {
    const exists = (await trx.raw<{ rows: unknown[] }>(`select 1 from pg_sequences where format('%I.%I', schemaname, sequencename) = ?`, [name])).rows.length > 0;
    if (exists) await trx.raw(`select setval(?::regclass, ?::bigint, ?)`, [name, last_value ?? start_value, last_value !== null]);
  }
}
