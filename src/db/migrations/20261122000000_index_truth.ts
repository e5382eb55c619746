import type { Knex } from "knex";

// What the index needs to tell the truth (SPEC.md section 3):
// - goods_index_deleted: GOODS_NO of rows deleted from PR_GOODS_SEARCH_INTF, recorded by a
//   row-level trigger, so that the next cursor or incremental run removes their documents.
// - goods_index_runs: the last run of each mode and of the batch, for the status RPC and for the
//   cron runner's incremental window (restarts and replicas read the same row).
// - goods_index_accepted goes: cursor finalize now flips rows as each bulk settles.

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`create table goods_index_deleted (
    goods_no varchar(20) primary key,
    deleted_at timestamptz(3) not null default clock_timestamp()
  )`);
  await knex.raw(`create function goods_index_record_delete() returns trigger language plpgsql as $$
    begin
      insert into goods_index_deleted (goods_no) values (old."GOODS_NO")
        on conflict (goods_no) do update set deleted_at = clock_timestamp();
      return null;
    end $$`);
  await knex.raw(`create trigger pr_goods_record_delete after delete on "PR_GOODS_SEARCH_INTF"
    for each row execute function goods_index_record_delete()`);
  // Removals read USE_YN='N' rows: cursor mode those not yet handled, incremental mode by time.
  await knex.raw(`create index pr_goods_removal_idx on "PR_GOODS_SEARCH_INTF" ("GOODS_NO") where "USE_YN" = 'N' and "INDEX_YN" = 'N'`);
  await knex.raw(`create index pr_goods_removal_mod_dtm_idx on "PR_GOODS_SEARCH_INTF" ("SYS_MOD_DTM") where "USE_YN" = 'N'`);

  await knex.raw(`create table goods_index_runs (
    mode text primary key,
    success boolean not null,
    started_at timestamptz(3) not null,
    finished_at timestamptz(3) not null,
    fetched_count integer not null,
    indexed_count integer not null,
    failed_count integer not null,
    removed_count integer not null,
    last_success_started_at timestamptz(3)
  )`);
  await knex.raw(`drop table goods_index_accepted`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`create unlogged table goods_index_accepted (
    run_id text not null,
    goods_no varchar(20) not null,
    sys_mod_dtm timestamptz(3) not null
  )`);
  await knex.raw(`create index goods_index_accepted_run_idx on goods_index_accepted (run_id, goods_no)`);
  await knex.raw(`drop table goods_index_runs`);
  await knex.raw(`drop index pr_goods_removal_mod_dtm_idx`);
  await knex.raw(`drop index pr_goods_removal_idx`);
  await knex.raw(`drop trigger pr_goods_record_delete on "PR_GOODS_SEARCH_INTF"`);
  await knex.raw(`drop function goods_index_record_delete()`);
  await knex.raw(`drop table goods_index_deleted`);
}
