import type { Knex } from "knex";

// The live feed's claims and backlog skip entries that wait out a backoff (docs/indexing.md, "Live
// changes"). An entry Elasticsearch refused gets retry_at (1 s, doubling up to 10 minutes) until a
// newer change of its product clears it. The one index on changed_at made every claim walk past
// every such entry at the head of the feed, and their age counted as the feed's lag. Two partial
// indexes instead: entries never refused since their last change, by changed_at (claims take the
// oldest; the backlog's age is the oldest); and refused ones, by retry_at (claims take those due).

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`create index goods_live_feed_fresh_idx on goods_live_feed (changed_at) where retry_at is null`);
  await knex.raw(`create index goods_live_feed_retry_idx on goods_live_feed (retry_at) where retry_at is not null`);
  await knex.raw(`drop index goods_live_feed_changed_at_idx`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`create index goods_live_feed_changed_at_idx on goods_live_feed (changed_at)`);
  await knex.raw(`drop index goods_live_feed_retry_idx`);
  await knex.raw(`drop index goods_live_feed_fresh_idx`);
}
