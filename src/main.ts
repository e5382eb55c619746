import { createApp } from "./app.js";
import { ConfigError, hostNarrowedToLoopback, loadConfig } from "./config.js";
import { startEmbeddedPostgres } from "./db/embedded-postgres.js";
import { createElasticsearchClient, splitNodeUrls } from "./elasticsearch-client.js";
import { databaseErrorText } from "./db/database-errors.js";
import { createKnex, migrateToLatest } from "./db/knex.js";
import { createMarketplace } from "./gpu/marketplace/index.js";
import { createLogger, redactUrl } from "./logger.js";
import { listen } from "./server/listen.js";

// The composition root: the only place that reads configuration and builds the database pool,
// the search client, the logger and the server, and the owner of shutdown.

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const logger = createLogger(config.logLevel);
  if (config.authTokens.length === 0) {
    logger.warn(
      hostNarrowedToLoopback() ? "AUTH_TOKENS is empty: ignoring HOST and binding to loopback only" : "AUTH_TOKENS is empty: binding to loopback only",
    );
  }

  const embedded = config.databaseUrl ? undefined : await startEmbeddedPostgres(config.dataDir);
  const databaseUrl = config.databaseUrl ?? embedded!.url;
  logger.info({ database: embedded ? `embedded (${config.dataDir})` : redactUrl(databaseUrl) }, "database");
  const knex = createKnex(databaseUrl, { poolMax: embedded ? 1 : 10, logger });
  try {
    await migrateToLatest(knex);
  } catch (err) {
    const where = embedded ? `the embedded database (${config.dataDir})` : `DATABASE_URL (${redactUrl(databaseUrl)})`;
    throw new Error(`${where} unreachable or not migratable: ${databaseErrorText(err)} ${firstLine(err)}`);
  }

  const elasticsearch = createElasticsearchClient(config.elasticsearchUrl);
  const marketplace = createMarketplace(config, logger, knex);
  const app = createApp({ config, logger, knex, elasticsearch, marketplace });
  const server = await listen({
    handler: app.handler,
    host: config.host,
    port: config.port,
    tls: config.tlsCertFile && config.tlsKeyFile ? { certFile: config.tlsCertFile, keyFile: config.tlsKeyFile } : undefined,
    timeouts: config.timeouts,
  });
  await app.start();
  logger.info({ url: server.url, elasticsearch: splitNodeUrls(config.elasticsearchUrl).map(redactUrl) }, "listening");

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down");
    try {
      await app.stop();
      await server.close();
      await marketplace.close();
      await knex.destroy();
      await elasticsearch.close();
      await embedded?.stop();
      logger.info("stopped");
      process.exit(0);
    } catch (err) {
      logger.error({ err }, "shutdown failed");
      process.exit(1);
    }
  };
  process.once("SIGTERM", () => void shutdown("SIGTERM"));
  process.once("SIGINT", () => void shutdown("SIGINT"));
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split("\n", 1)[0]!.slice(0, 200);
}

main().catch((err: unknown) => {
  process.stderr.write(`start-up failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
