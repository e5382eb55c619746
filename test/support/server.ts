import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import pino from "pino";
import { createApp, type App } from "../../src/app.js";
import { loadConfig, type Config } from "../../src/config.js";
import { listen, type RunningServer } from "../../src/server/listen.js";

export interface TestServer {
  readonly url: string;
  readonly port: number;
  readonly app: App;
  close(): Promise<void>;
}

/** The real server, with the real app on the given database and search engine, on a free loopback port. */
export async function startTestServer(options: {
  knex: Knex;
  elasticsearch: Client;
  env?: Record<string, string>;
}): Promise<TestServer> {
  const config: Config = loadConfig({ PORT: "0", ...options.env });
  const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });
  const app = createApp({ config, logger, knex: options.knex, elasticsearch: options.elasticsearch });
  const server: RunningServer = await listen({ handler: app.handler, host: "127.0.0.1", port: 0 });
  await app.start();
  return {
    url: server.url,
    port: server.port,
    app,
    async close() {
      await app.stop();
      await server.close(1000);
    },
  };
}
