import { randomBytes } from "node:crypto";
import type { Knex } from "knex";
import pg from "pg";
import { createKnex, migrateToLatest } from "../../src/db/knex.js";

/**
 * The server the tests create their databases on, as a role that may: DATABASE_URL, set by the
 * run's global setup to the embedded PostgreSQL it starts when the run was given none.
 */
export function adminDatabaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error("DATABASE_URL is unset: the tests' global setup (test/support/global-setup.ts) sets it");
  return url;
}

/**
 * Runs one query as a client of its own on the maintenance database of `database`'s server: never
 * a session of the test database, so it can watch or end that database's sessions.
 */
export async function queryOnServer<T extends pg.QueryResultRow>(database: Pick<TestDatabase, "url">, sql: string, params: unknown[] = []): Promise<T[]> {
  const url = new URL(database.url);
  url.pathname = "/postgres";
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

/** The database away as in a restart or a failover: new connections refused, every session ended. */
export async function refuseConnections(database: Pick<TestDatabase, "name" | "url">): Promise<void> {
  await queryOnServer(database, `alter database ${database.name} allow_connections false`);
  await queryOnServer(database, "select pg_terminate_backend(pid) from pg_stat_activity where datname = $1", [database.name]);
}

/** The database taking connections again. */
export async function allowConnections(database: Pick<TestDatabase, "name" | "url">): Promise<void> {
  await queryOnServer(database, `alter database ${database.name} allow_connections true`);
}

export interface TestDatabase {
  readonly name: string;
  readonly url: string;
  readonly knex: Knex;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

/**
 * A fresh, uniquely named database on the real server, migrated to the latest schema unless
 * `migrate: false`. Every test file makes its own, so files run in parallel without sharing state.
 */
export async function createTestDatabase(options: { migrate?: boolean; poolMax?: number } = {}): Promise<TestDatabase> {
  const name = `test_${randomBytes(6).toString("hex")}`;
  await withAdmin((client) => client.query(`create database ${name}`));
  const url = new URL(adminDatabaseUrl());
  url.pathname = `/${name}`;
  const knex = createKnex(url.toString(), { poolMax: options.poolMax ?? 10 });
  if (options.migrate !== false) await migrateToLatest(knex);
  return {
    name,
    url: url.toString(),
    knex,
    async drop() {
      await knex.destroy();
      await withAdmin((client) => client.query(`drop database if exists ${name} with (force)`));
    },
  };
}

async function withAdmin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminDatabaseUrl() });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}
