import type { Knex } from "knex";
import type { Logger } from "pino";
import type { Config } from "../config.js";
import { messageOf } from "../errors.js";
import { redactUrl } from "../logger.js";
import { databaseErrorText } from "./database-errors.js";
import { startEmbeddedPostgres, type EmbeddedPostgres } from "./embedded/embedded-postgres.js";
import { createKnex, migrateToLatest } from "./knex.js";
import { importPgliteData } from "./embedded/pglite-import.js";

// The database the configuration names, migrated and ready: DATABASE_URL, or the embedded
// PostgreSQL of DATA_DIR. The service and the sample-data commands open it the same way.

export interface Database {
  readonly knex: Knex;
  /** What to call it in logs and messages (no password). */
  readonly description: string;
  readonly embedded: boolean;
  /** Closes the pool, then stops the embedded server if this process started it. */
  close(): Promise<void>;
}

export interface OpenOptions {
  /**
   * The embedded server of DATA_DIR run by another live process: "share" connects to it (the
   * sample-data commands beside a running service), "refuse" fails (a second service).
   */
  whenRunning: "share" | "refuse";
  /** The embedded server ended on its own (the service stops then). */
  onUnexpectedExit?: (detail: string) => void;
}

export async function openDatabase(config: Pick<Config, "databaseUrl" | "dataDir">, logger: Logger, options: OpenOptions): Promise<Database> {
  let embedded: EmbeddedPostgres | undefined;
  if (!config.databaseUrl) {
    logger.info({ data_dir: config.dataDir }, "opening the embedded PostgreSQL (its first start initialises it)");
    const log = logger.child({ component: "embedded-postgres" });
    embedded = await startEmbeddedPostgres(config.dataDir, {
      whenRunning: options.whenRunning,
      onLog: (line) => log.debug({ detail: line }, "embedded PostgreSQL log"),
      onUnexpectedExit: options.onUnexpectedExit,
    });
  }
  const url = config.databaseUrl ?? embedded!.url;
  const description = embedded ? `the embedded PostgreSQL (${config.dataDir})` : `DATABASE_URL (${redactUrl(url)})`;
  const knex = createKnex(url, { logger });
  const close = async () => {
    await knex.destroy();
    await embedded?.stop();
  };
  try {
    await migrateToLatest(knex);
  } catch (err) {
    await close();
    throw new Error(`${description} unreachable or not migratable: ${databaseErrorText(err)} ${firstLine(err)}`, { cause: err });
  }
  if (embedded) await importEarlierDataDir(config.dataDir, embedded.adminUrl, logger).catch(async (err: unknown) => {
    await close();
    throw err;
  });
  return { knex, description, embedded: embedded !== undefined, close };
}

/** The import writes with triggers held off (session_replication_role), which takes the superuser. */
async function importEarlierDataDir(dataDir: string, adminUrl: string, logger: Logger): Promise<void> {
  const admin = createKnex(adminUrl, { poolMax: 1 });
  try {
    await importPgliteData(dataDir, admin, logger);
  } finally {
    await admin.destroy();
  }
}

function firstLine(err: unknown): string {
  return messageOf(err).split("\n", 1)[0]!.slice(0, 300);
}
