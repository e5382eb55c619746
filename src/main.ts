import { createApp } from "./app.js";
import { ConfigError, hostNarrowedToLoopback, loadConfig } from "./config.js";
import { openDatabase } from "./db/database.js";
import { createElasticsearchClient, splitNodeUrls } from "./elasticsearch-client.js";
import { createMarketplace } from "./gpu/marketplace/index.js";
import { createLogger, redactUrl } from "./logger.js";
import { readTokenFile } from "./server/auth/token-file.js";
import { listen } from "./server/listen.js";

// The composition root: the only place that reads configuration and builds the database pool,
// the search client, the logger and the server, and the owner of shutdown.

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
    // A bad token file is a configuration error like any other: named, before anything starts.
    if (config.authTokensFile !== undefined) readTokenFile(config.authTokensFile);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const logger = createLogger(config.logLevel);
  if (config.authTokens.length === 0 && config.authTokensFile === undefined) {
    logger.warn(
      hostNarrowedToLoopback()
        ? "AUTH_TOKENS and AUTH_TOKENS_FILE are unset: ignoring HOST and binding to loopback only"
        : "AUTH_TOKENS and AUTH_TOKENS_FILE are unset: binding to loopback only",
    );
  }

  let stop: ((reason: string, exitCode?: number) => Promise<void>) | undefined;
  const database = await openDatabase(config, logger, {
    whenRunning: "refuse",
    // Without its database the service cannot keep its promises: it stops, so that a supervisor restarts both.
    onUnexpectedExit: (detail) => {
      logger.error({ detail }, "the embedded PostgreSQL stopped unexpectedly; stopping the service");
      if (stop) void stop("embedded PostgreSQL exited", 1);
      else process.exit(1);
    },
  });
  const { knex } = database;
  logger.info({ database: database.description }, "database");

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
  logger.info(
    {
      address: `${config.host}:${server.port}`,
      url: server.url,
      docs: `${server.url}/docs`,
      marketplace: config.marketplace.markets.join(","),
      database: database.embedded ? "embedded" : "DATABASE_URL",
      elasticsearch: splitNodeUrls(config.elasticsearchUrl).map(redactUrl),
    },
    "listening",
  );

  let stopping = false;
  stop = async (reason, exitCode = 0) => {
    if (stopping) return;
    stopping = true;
    logger.info({ reason }, "shutting down");
    try {
      await app.stop();
      await server.close();
      await marketplace.close();
      await elasticsearch.close();
      await database.close();
      logger.info("stopped");
      process.exit(exitCode);
    } catch (err) {
      logger.error({ err }, "shutdown failed");
      process.exit(1);
    }
  };
  process.once("SIGTERM", () => void stop?.("SIGTERM"));
  process.once("SIGINT", () => void stop?.("SIGINT"));
  process.on("SIGHUP", () => void app.reloadTokens());
}

main().catch((err: unknown) => {
  process.stderr.write(`start-up failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
