import type { Knex } from "knex";

// The allowance of keys' limits across processes (docs/keys.md, "Allowance"). Per key: the
// period's spend, the per-second buckets of "any 60 s", and one lease per process. The sum of a
// key's counted buckets (or its spend) and its live leases never passes its limit: every grant is
// made by gpu_key_lease_renew under the key's row lock, as one statement.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable("gpu_key_allowances", (t) => {
    t.text("key_id").primary();
    t.timestamp("period_starts_at", { useTz: true });
    // Micro-dollars spent in the period, leases of dead processes included.
    t.bigInteger("spent").notNullable().defaultTo(0);
  });
  await knex.schema.createTable("gpu_key_window_seconds", (t) => {
    t.text("key_id").notNullable().references("key_id").inTable("gpu_key_allowances").onDelete("cascade");
    t.bigInteger("second").notNullable();
    t.bigInteger("requests").notNullable().defaultTo(0);
    t.bigInteger("tokens").notNullable().defaultTo(0);
    t.primary(["key_id", "second"]);
  });
  await knex.schema.createTable("gpu_key_leases", (t) => {
    t.text("key_id").notNullable().references("key_id").inTable("gpu_key_allowances").onDelete("cascade");
    // A process and its lease's epoch: a process whose lease lapsed comes back as a new holder.
    t.text("holder").notNullable();
    t.bigInteger("parallel").notNullable().defaultTo(0);
    t.bigInteger("requests").notNullable().defaultTo(0);
    t.bigInteger("tokens").notNullable().defaultTo(0);
    t.bigInteger("micros").notNullable().defaultTo(0);
    t.timestamp("expires_at", { useTz: true }).notNullable();
    t.primary(["key_id", "holder"]);
  });
  await knex.raw(RENEW);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw("drop function gpu_key_lease_renew");
  await knex.schema.dropTable("gpu_key_leases");
  await knex.schema.dropTable("gpu_key_window_seconds");
  await knex.schema.dropTable("gpu_key_allowances");
}

// One process's report and its new lease, in one statement:
//  1. lock the key's row (every grant of a key is made one at a time);
//  2. leases that expired unrenewed are counted as used in full (nobody knows how much their dead
//     holder used): requests and tokens in the bucket of their expiry, money as spent; their
//     parallel places are free (those answers died with their process);
//  3. a new budget period starts the spend at 0;
//  4. the report's use goes into the bucket of this second (no earlier than the use) and the spend;
//  5. buckets that no longer count (61 s after their second) go;
//  6. the lease becomes what the process has in flight (`keep`, always free for it: it was in its
//     lease) plus as many whole units (one request's ask) as it wants and every limit leaves beside
//     the counted buckets (or the spend) and the other live leases, at most half of those (one at
//     least): a lease never holds a part of one limit it cannot use for lack of another, and the
//     other processes find some room. A null limit grants null; a lease of nothing is
//     given back.
// It answers the lease, the database's clock, the buckets, the other leases and the spend.
const RENEW = `
create function gpu_key_lease_renew(
  p_key text, p_holder text, p_ttl_ms integer, p_period_starts_at timestamptz,
  p_used_requests bigint, p_used_tokens bigint, p_used_micros bigint,
  p_keep_parallel bigint, p_keep_requests bigint, p_keep_tokens bigint, p_keep_micros bigint,
  p_unit_parallel bigint, p_unit_requests bigint, p_unit_tokens bigint, p_unit_micros bigint, p_units bigint,
  p_max_parallel bigint, p_rpm bigint, p_tpm bigint, p_budget bigint
) returns jsonb language plpgsql as $$
declare
  v_now timestamptz;
  v_second bigint;
  v_spent bigint;
  v_window record;
  v_others record;
  v_free record;
  v_units bigint;
  v_grant record;
begin
  insert into gpu_key_allowances (key_id, period_starts_at) values (p_key, p_period_starts_at) on conflict do nothing;
  perform 1 from gpu_key_allowances where key_id = p_key for update;
  v_now := clock_timestamp();
  v_second := floor(extract(epoch from v_now))::bigint;

  with dead as (
    delete from gpu_key_leases where key_id = p_key and expires_at <= v_now returning *
  ), counted as (
    insert into gpu_key_window_seconds (key_id, second, requests, tokens)
    select p_key, floor(extract(epoch from expires_at))::bigint, sum(requests), sum(tokens) from dead group by 2
    on conflict (key_id, second) do update
      set requests = gpu_key_window_seconds.requests + excluded.requests, tokens = gpu_key_window_seconds.tokens + excluded.tokens
  )
  update gpu_key_allowances set spent = spent + coalesce((select sum(micros) from dead), 0) where key_id = p_key;

  update gpu_key_allowances
     set spent = case when period_starts_at is null or p_period_starts_at > period_starts_at then 0 else spent end + p_used_micros,
         period_starts_at = greatest(period_starts_at, p_period_starts_at)
   where key_id = p_key
  returning spent into v_spent;

  if p_used_requests > 0 or p_used_tokens > 0 then
    insert into gpu_key_window_seconds (key_id, second, requests, tokens) values (p_key, v_second, p_used_requests, p_used_tokens)
    on conflict (key_id, second) do update
      set requests = gpu_key_window_seconds.requests + excluded.requests, tokens = gpu_key_window_seconds.tokens + excluded.tokens;
  end if;
  delete from gpu_key_window_seconds where key_id = p_key and second < v_second - 60;

  select coalesce(sum(requests), 0) as requests, coalesce(sum(tokens), 0) as tokens
    into v_window from gpu_key_window_seconds where key_id = p_key;
  select coalesce(sum(parallel), 0) as parallel, coalesce(sum(requests), 0) as requests,
         coalesce(sum(tokens), 0) as tokens, coalesce(sum(micros), 0) as micros
    into v_others from gpu_key_leases where key_id = p_key and holder <> p_holder;

  select p_max_parallel - v_others.parallel as parallel, p_rpm - v_window.requests - v_others.requests as requests,
         p_tpm - v_window.tokens - v_others.tokens as tokens, p_budget - v_spent - v_others.micros as micros
    into v_free;
  -- Whole units that fit beside what is kept, under every limit (a null limit or a unit of 0 leaves
  -- any number); a process takes at most half of them (one at least), so that the others find some.
  v_units := greatest(0, least(
    case when v_free.parallel is null or p_unit_parallel = 0 then null else (v_free.parallel - p_keep_parallel) / p_unit_parallel end,
    case when v_free.requests is null or p_unit_requests = 0 then null else (v_free.requests - p_keep_requests) / p_unit_requests end,
    case when v_free.tokens is null or p_unit_tokens = 0 then null else (v_free.tokens - p_keep_tokens) / p_unit_tokens end,
    case when v_free.micros is null or p_unit_micros = 0 then null else (v_free.micros - p_keep_micros) / p_unit_micros end));
  v_units := least(p_units, case when v_units is null then p_units else greatest(least(v_units, 1), (v_units + 1) / 2) end);
  select case when v_free.parallel is null then null else least(p_keep_parallel + v_units * p_unit_parallel, greatest(v_free.parallel, 0)) end as parallel,
         case when v_free.requests is null then null else least(p_keep_requests + v_units * p_unit_requests, greatest(v_free.requests, 0)) end as requests,
         case when v_free.tokens is null then null else least(p_keep_tokens + v_units * p_unit_tokens, greatest(v_free.tokens, 0)) end as tokens,
         case when v_free.micros is null then null else least(p_keep_micros + v_units * p_unit_micros, greatest(v_free.micros, 0)) end as micros
    into v_grant;

  if coalesce(v_grant.parallel, 0) + coalesce(v_grant.requests, 0) + coalesce(v_grant.tokens, 0) + coalesce(v_grant.micros, 0) = 0 then
    delete from gpu_key_leases where key_id = p_key and holder = p_holder;
  else
    insert into gpu_key_leases (key_id, holder, parallel, requests, tokens, micros, expires_at)
    values (p_key, p_holder, coalesce(v_grant.parallel, 0), coalesce(v_grant.requests, 0), coalesce(v_grant.tokens, 0),
            coalesce(v_grant.micros, 0), v_now + make_interval(secs => p_ttl_ms / 1000.0))
    on conflict (key_id, holder) do update
      set parallel = excluded.parallel, requests = excluded.requests, tokens = excluded.tokens,
          micros = excluded.micros, expires_at = excluded.expires_at;
  end if;

  return jsonb_build_object(
    'granted', jsonb_build_object('parallel', v_grant.parallel, 'requests', v_grant.requests, 'tokens', v_grant.tokens, 'micros', v_grant.micros),
    'now_ms', floor(extract(epoch from v_now) * 1000)::bigint,
    'buckets', coalesce((select jsonb_agg(jsonb_build_array(second, requests, tokens) order by second)
                           from gpu_key_window_seconds where key_id = p_key), '[]'::jsonb),
    'others', jsonb_build_object('parallel', v_others.parallel, 'requests', v_others.requests, 'tokens', v_others.tokens, 'micros', v_others.micros),
    'spent', v_spent);
end $$`;
