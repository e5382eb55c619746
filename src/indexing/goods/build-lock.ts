import type { Knex } from "knex";

// The live follower writes each change into a rebuild's index through the building alias, after
// it has seen that alias exist. A delete at an external version addressed to a name that is no
// longer an alias makes Elasticsearch create an empty index of that name (require_alias does not
// apply to deletes), and that index then refuses every later rebuild its building alias. So the
// follower's look-then-write and the rebuild's removal of the building alias (going live, or
// deleting a build) exclude each other, through a PostgreSQL advisory transaction lock per alias:
// across replicas, and released with its transaction if a process dies holding it.

/** Runs `write` while no building alias of `alias` can go away (shared: writers do not wait for each other). */
export function whileBuildStays<T>(knex: Knex, alias: string, write: () => Promise<T>): Promise<T> {
  return withLock(knex, alias, "pg_advisory_xact_lock_shared", write);
}

/** Runs `change` once no writer is between seeing the building alias and writing through it. */
export function whileNoBuildWrite<T>(knex: Knex, alias: string, change: () => Promise<T>): Promise<T> {
  return withLock(knex, alias, "pg_advisory_xact_lock", change);
}

function withLock<T>(knex: Knex, alias: string, lock: string, work: () => Promise<T>): Promise<T> {
  return knex.transaction(async (trx) => {
    await trx.raw(`select ${lock}(hashtext(?))`, [`goods_index.build:${alias}`]);
    return work();
  });
}
