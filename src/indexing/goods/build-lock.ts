import type { Knex } from "knex";
import pg from "pg";
import { databaseUrlOf } from "../../db/knex.js";

// The live follower writes each change into a rebuild's index through the building alias, after
// it has seen that alias exist. A delete at an external version addressed to a name that is no
// longer an alias makes Elasticsearch create an empty index of that name (require_alias does not
// apply to deletes), and that index then refuses every later rebuild its building alias. So the
// follower's look-then-write and the rebuild's removal of the building alias (going live, or
// deleting a build) exclude each other, through a PostgreSQL advisory lock per alias: across
// replicas, and released with its session if a process dies holding it.
//
// The lock is held by a session of its own, with no transaction open: the work it protects is
// Elasticsearch requests (a whole bulk, with its timeouts and 429 backoff), and a session idle in
// a transaction that long is what idle_in_transaction_session_timeout kills, dropping the lock in
// the middle of the write.

/** Runs `write` while no building alias of `alias` can go away (shared: writers do not wait for each other). */
export function whileBuildStays<T>(knex: Knex, alias: string, write: () => Promise<T>): Promise<T> {
  return withLock(knex, alias, "pg_advisory_lock_shared", write);
}

/** Runs `change` once no writer is between seeing the building alias and writing through it. */
export function whileNoBuildWrite<T>(knex: Knex, alias: string, change: () => Promise<T>): Promise<T> {
  return withLock(knex, alias, "pg_advisory_lock", change);
}

async function withLock<T>(knex: Knex, alias: string, lock: string, work: () => Promise<T>): Promise<T> {
  const session = new pg.Client({ connectionString: databaseUrlOf(knex), application_name: "indexing-build-lock", connectionTimeoutMillis: 10_000 });
  // A session that breaks has freed the lock; the work in progress finishes, and the next look
  // at the building alias is made under a new lock.
  session.on("error", () => undefined);
  await session.connect();
  try {
    await session.query(`select ${lock}(hashtext($1))`, [`goods_index.build:${alias}`]);
    return await work();
  } finally {
    // Ending the session releases the lock, whatever became of the work.
    await session.end().catch(() => undefined);
  }
}
