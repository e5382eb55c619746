import knexFactory, { type Knex } from "knex";
import type { Logger } from "pino";
import { migrationSource } from "./migrations/index.js";

export interface KnexOptions {
  /** Connections in the pool. */
  poolMax?: number;
  /** Where knex's own warnings go (e.g. a dropped connection); by default, the console. */
  logger?: Logger;
}

// knex keeps the connection only parsed; the sessions outside the pool need the URL itself.
const urls = new WeakMap<Knex, string>();

export function createKnex(url: string, options: KnexOptions = {}): Knex {
  const knex = knexFactory({
    client: "pg",
    connection: url,
    pool: { min: 0, max: options.poolMax ?? 10 },
    acquireConnectionTimeout: 10_000,
    migrations: { migrationSource, tableName: "knex_migrations" },
    ...(options.logger ? { log: knexLog(options.logger.child({ component: "knex" })) } : {}),
  });
  urls.set(knex, url);
  return knex;
}

/** The URL the pool connects with, for the sessions that live outside it (advisory locks). */
export function databaseUrlOf(knex: Knex): string {
  const url = urls.get(knex);
  if (url === undefined) throw new Error("databaseUrlOf: this knex was not made by createKnex");
  return url;
}

/** Applies every migration that has not run yet. */
export async function migrateToLatest(knex: Knex): Promise<void> {
  await knex.migrate.latest();
}

function knexLog(logger: Logger): Knex.Config["log"] {
  return {
    warn: (message: unknown) => logger.warn({ detail: String(message) }, "knex warning"),
    error: (message: unknown) => logger.error({ detail: String(message) }, "knex error"),
    deprecate: (method: string, alternative: string) => logger.warn({ method, alternative }, "knex deprecation"),
    debug: (message: unknown) => logger.debug({ detail: String(message) }, "knex debug"),
  };
}
