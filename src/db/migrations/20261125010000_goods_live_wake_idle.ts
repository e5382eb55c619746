import type { Knex } from "knex";

// The feed's triggers wake the live follower only while it sleeps (docs/indexing.md, "Live
// changes"). A NOTIFY serialises the commits of every transaction that sends one: PostgreSQL holds
// one lock from the notification's queueing through the commit's WAL flush, so group commit stops.
// Measured with 16 writers updating prices on the 2-core machine: 6,540 commits/s without the
// feed, 3,880 with the feed and no NOTIFY, 1,840 with a NOTIFY in every commit.
//
// goods_live_wakeup.listening is set by the follower when a pass finds nothing to do, and cleared
// when a pass finds many changes (the writers are busy); the triggers read it (no write) and
// notify only when it is set. A busy follower goes straight from pass to pass: no wake-up needed.
//
// The four trigger functions of 20261125000000_goods_live_feed are rewritten as they are, with
// their NOTIFY replaced by goods_live_wake().
//
// The feed is a queue: every entry is inserted and soon deleted, so its dead rows pile up at the
// head of the changed_at index that every claim walks. It is vacuumed after every 10,000 dead
// rows whatever its size (the default waits for a fifth of the table: 200,000 dead rows in a feed
// of a million entries, after an outage).

const KINDS = ["insert", "update", "delete", "truncate"] as const;
const NOTIFY = "perform pg_notify('goods_live', '');";
const WAKE = "perform goods_live_wake();";

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`create table goods_live_wakeup (
    id boolean primary key default true check (id),
    listening boolean not null default false
  )`);
  await knex.raw(`insert into goods_live_wakeup default values`);
  await knex.raw(`create function goods_live_wake() returns void language plpgsql as $$
    begin
      if (select listening from goods_live_wakeup) then
        perform pg_notify('goods_live', '');
      end if;
    end $$`);
  await replaceInTriggerFunctions(knex, NOTIFY, WAKE);
  await knex.raw(`alter table goods_live_feed set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`alter table goods_live_feed reset (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)`);
  await replaceInTriggerFunctions(knex, WAKE, NOTIFY);
  await knex.raw(`drop function goods_live_wake()`);
  await knex.raw(`drop table goods_live_wakeup`);
}

async function replaceInTriggerFunctions(knex: Knex, from: string, to: string): Promise<void> {
  for (const kind of KINDS) {
    const { rows } = await knex.raw<{ rows: Array<{ definition: string }> }>(`select pg_get_functiondef('goods_live_record_${kind}'::regproc) as definition`);
    const definition = rows[0]?.definition ?? "";
    if (definition.split(from).length !== 2) throw new Error(`goods_live_record_${kind}() does not hold '${from}' exactly once`);
    // knex.raw reads "?" as a binding: escaped, a function body passes as it is.
    await knex.raw(definition.replace(from, to).replaceAll("?", "\\?"));
  }
}
