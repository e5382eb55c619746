import knexFactory, { type Knex } from "knex";
import { migrationSource } from "./migrations/index.js";

export interface KnexOptions {
  /** Connections in the pool; the embedded PostgreSQL serves one at a time. */
  poolMax?: number;
}

export function createKnex(url: string, options: KnexOptions = {}): Knex {
  return knexFactory({
    client: "pg",
    connection: url,
    pool: { min: 0, max: options.poolMax ?? 10 },
    acquireConnectionTimeout: 10_000,
    migrations: { migrationSource, tableName: "knex_migrations" },
  });
}

/** Applies every migration that has not run yet. */
export async function migrateToLatest(knex: Knex): Promise<void> {
  await knex.migrate.latest();
}
