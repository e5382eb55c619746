import type { Knex } from "knex";

// Live indexing (SPEC.md section 3, "Live changes"; docs/indexing.md, "Live changes"):
//
// - "INDEX_VERSION": every change of a row a document depends on draws a new value from one
//   sequence; every writer sends it to Elasticsearch as the document's external version, so an
//   older state never overwrites a newer one. Tombstones (goods_index_deleted) carry the version
//   of the delete. The sequence starts far above any internal version a document of an index
//   written before versions existed can have reached, so the first versioned write wins.
// - goods_live_feed: the products changed and not yet applied, one row per product however often
//   it changes. change_id is drawn from the same sequence by every change (after the row's new
//   version): the follower removes an entry only if it is still the change it applied.
// - goods_live_progress: the follower's totals, the same on every replica.
//
// Triggers: inserts and deletes are recorded per statement over their transition tables, so a
// large load or purge costs one set-based insert. Updates are recorded per row, and only when a
// document column changed (the WHEN clause is checked without calling any function): the
// indexer's INDEX_YN flips, a million at a time, cost nothing here, where a statement trigger
// would copy every flipped row into a transition table. A truncate records every row before it
// goes. Every trigger wakes the follower with NOTIFY goods_live (sent at commit).

const TABLE = `"PR_GOODS_SEARCH_INTF"`;
const SEQUENCE = "goods_index_version_seq";

/** The columns a document or the eligibility depends on: INDEX_YN is not one of them. */
const DOCUMENT_COLUMNS = [
  "GOODS_NO",
  "GOODS_NM",
  "BRAND_NM",
  "CATE_CD",
  "CATE_PATH",
  "SALE_PRICE",
  "PROMO_PRICE",
  "ICON_INFO",
  "IMG_URL",
  "USE_YN",
  "SYS_REG_DTM",
  "SYS_MOD_DTM",
];

const row = (prefix: string) => `(${DOCUMENT_COLUMNS.map((c) => `${prefix}."${c}"`).join(", ")})`;

/** Upserts feed entries for the GOODS_NO values a query yields. */
const RECORD_FEED = (select: string) => `
      insert into goods_live_feed (goods_no, change_id, changed_at)
        select goods_no, nextval('${SEQUENCE}'), clock_timestamp() from (${select}) changed(goods_no)
        on conflict (goods_no) do update
          set change_id = excluded.change_id, attempts = 0, retry_at = null, last_error = null`;

/**
 * Tombstones and feed entries for the GOODS_NO values a query yields. The delete's version is
 * also its feed entry's change_id: a follower that finds neither row nor tombstone (a run cleared
 * it meanwhile) still deletes at that version.
 */
const RECORD_DELETES = (select: string) => `
      with gone as (
        insert into goods_index_deleted (goods_no, version, deleted_at)
          select goods_no, nextval('${SEQUENCE}'), clock_timestamp() from (${select}) gone(goods_no)
          on conflict (goods_no) do update set version = excluded.version, deleted_at = excluded.deleted_at
          returning goods_no, version
      )
      insert into goods_live_feed (goods_no, change_id, changed_at)
        select goods_no, version, clock_timestamp() from gone
        on conflict (goods_no) do update
          set change_id = excluded.change_id, attempts = 0, retry_at = null, last_error = null`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`create sequence ${SEQUENCE} as bigint start with 1000000000000`);
  await knex.raw(`alter table ${TABLE} add column "INDEX_VERSION" bigint not null default nextval('${SEQUENCE}')`);
  await knex.raw(`alter table goods_index_deleted add column version bigint not null default nextval('${SEQUENCE}')`);

  await knex.raw(`create table goods_live_feed (
    goods_no varchar(20) primary key,
    change_id bigint not null,
    -- The first change not yet applied: a later change of the product keeps it.
    changed_at timestamptz(3) not null,
    attempts integer not null default 0,
    retry_at timestamptz(3),
    last_error text
  )`);
  await knex.raw(`create index goods_live_feed_changed_at_idx on goods_live_feed (changed_at)`);
  await knex.raw(`create table goods_live_progress (
    id boolean primary key default true check (id),
    applied_total bigint not null default 0,
    last_applied_at timestamptz(3)
  )`);
  await knex.raw(`insert into goods_live_progress default values`);

  // The delete trigger of index_truth becomes the statement-level one below.
  await knex.raw(`drop trigger pr_goods_record_delete on ${TABLE}`);
  await knex.raw(`drop function goods_index_record_delete()`);

  await knex.raw(`create function goods_live_record_insert() returns trigger language plpgsql as $$
    begin
      -- A product inserted again drew its version before the delete it waited for committed:
      -- a newer version than the tombstone's, or the tombstone would hide it in Elasticsearch.
      update ${TABLE} g set "INDEX_VERSION" = nextval('${SEQUENCE}')
        from new_rows n join goods_index_deleted d on d.goods_no = n."GOODS_NO"
       where g."GOODS_NO" = n."GOODS_NO" and d.version > n."INDEX_VERSION";
      ${RECORD_FEED(`select "GOODS_NO" from new_rows`)};
      perform pg_notify('goods_live', '');
      return null;
    end $$`);
  await knex.raw(`create function goods_live_record_update() returns trigger language plpgsql as $$
    begin
      new."INDEX_VERSION" := nextval('${SEQUENCE}');
      if new."GOODS_NO" <> old."GOODS_NO" then
        ${RECORD_DELETES(`select old."GOODS_NO"`)};
      end if;
      ${RECORD_FEED(`select new."GOODS_NO"`)};
      perform pg_notify('goods_live', '');
      return new;
    end $$`);
  await knex.raw(`create function goods_live_record_delete() returns trigger language plpgsql as $$
    begin
      ${RECORD_DELETES(`select "GOODS_NO" from old_rows`)};
      perform pg_notify('goods_live', '');
      return null;
    end $$`);
  await knex.raw(`create function goods_live_record_truncate() returns trigger language plpgsql as $$
    begin
      ${RECORD_DELETES(`select "GOODS_NO" from ${TABLE}`)};
      perform pg_notify('goods_live', '');
      return null;
    end $$`);

  await knex.raw(`create trigger pr_goods_live_insert after insert on ${TABLE}
    referencing new table as new_rows for each statement execute function goods_live_record_insert()`);
  await knex.raw(`create trigger pr_goods_live_update before update on ${TABLE}
    for each row when (${row("old")} is distinct from ${row("new")}) execute function goods_live_record_update()`);
  await knex.raw(`create trigger pr_goods_live_delete after delete on ${TABLE}
    referencing old table as old_rows for each statement execute function goods_live_record_delete()`);
  await knex.raw(`create trigger pr_goods_live_truncate before truncate on ${TABLE}
    for each statement execute function goods_live_record_truncate()`);
}

export async function down(knex: Knex): Promise<void> {
  for (const kind of ["insert", "update", "delete", "truncate"]) {
    await knex.raw(`drop trigger pr_goods_live_${kind} on ${TABLE}`);
    await knex.raw(`drop function goods_live_record_${kind}()`);
  }
  await knex.raw(`drop table goods_live_progress`);
  await knex.raw(`drop table goods_live_feed`);
  await knex.raw(`alter table goods_index_deleted drop column version`);
  await knex.raw(`alter table ${TABLE} drop column "INDEX_VERSION"`);
  await knex.raw(`drop sequence ${SEQUENCE}`);
  await knex.raw(`create function goods_index_record_delete() returns trigger language plpgsql as $$
    begin
      insert into goods_index_deleted (goods_no) values (old."GOODS_NO")
        on conflict (goods_no) do update set deleted_at = clock_timestamp();
      return null;
    end $$`);
  await knex.raw(`create trigger pr_goods_record_delete after delete on ${TABLE}
    for each row execute function goods_index_record_delete()`);
}
