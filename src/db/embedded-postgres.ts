import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";

export interface EmbeddedPostgres {
  /** A postgres:// URL on loopback that `pg` (and so knex and pg-query-stream) connects to. */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * PostgreSQL in the process (PGlite, persisted under dataDir) behind its wire-protocol socket
 * server, so that the rest of the code talks to it exactly as to a real server. It serves one
 * connection at a time: callers use a pool of one.
 */
export async function startEmbeddedPostgres(dataDir: string): Promise<EmbeddedPostgres> {
  const path = resolve(dataDir, "pglite");
  mkdirSync(path, { recursive: true });
  const db = await PGlite.create(path);
  const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0 });
  await server.start();
  const address = server.getServerConn();
  return {
    url: `postgres://postgres@${address}/postgres`,
    async stop() {
      await server.stop();
      await db.close();
    },
  };
}
