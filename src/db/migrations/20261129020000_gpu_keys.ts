import type { Knex } from "knex";

// Keys for callers of the endpoints (SPEC.md section 2, "Keys for callers"), in two tables, and
// the endpoints' token price:
// - gpu_keys: one row per key, a revoked one kept (its name may be taken again by a new key).
//   Only the SHA-256 of a secret is stored; after a rotation the previous secret's digest stays
//   valid until previous_valid_until. Money as integer micro-dollars. `version` takes the next
//   value of gpu_keys_version on every write of what a directory holds (not last_used_at), so that the sum of versions changes whenever any
//   row does, whichever transaction commits first: each process polls that sum and reloads its
//   directory of keys only when it moved (src/server/keys/key-directory.ts).
// - gpu_key_usage_minutes: what each key used of each endpoint per minute, written by each
//   process's proxy in batches (a row per process: absolute counts) and summed by the usage read; `refused` counts refusals by reason. No foreign key:
//   rows are measurements, kept as long as the endpoints' history and pruned with it.
// - gpu_endpoints.token_input_per_mtok and token_output_per_mtok: dollars per million tokens,
//   both set or both null (unpriced).

export async function up(knex: Knex): Promise<void> {
  await knex.raw("create sequence gpu_keys_version");
  await knex.schema.createTable("gpu_keys", (t) => {
    t.bigIncrements("id");
    t.text("name").notNullable();
    t.binary("secret_sha256").notNullable().unique();
    t.text("key_prefix").notNullable();
    t.binary("previous_sha256");
    t.timestamp("previous_valid_until", { useTz: true });
    t.specificType("endpoints", "text[]").notNullable().defaultTo("{}");
    t.bigInteger("max_budget_micros");
    t.text("budget_duration");
    t.integer("rpm_limit");
    t.integer("tpm_limit");
    t.integer("max_parallel_requests");
    t.timestamp("expires_at", { useTz: true });
    t.timestamp("created_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("last_used_at", { useTz: true });
    t.timestamp("revoked_at", { useTz: true });
    t.bigInteger("version").notNullable().defaultTo(knex.raw("nextval('gpu_keys_version')"));
  });
  await knex.raw("create unique index gpu_keys_live_name on gpu_keys (name) where revoked_at is null");
  await knex.raw(
    "alter table gpu_keys add constraint gpu_keys_budget_duration check (budget_duration is null or budget_duration in ('1h', '1d', '7d', '30d'))",
  );
  await knex.schema.createTable("gpu_key_usage_minutes", (t) => {
    t.text("key_name").notNullable();
    t.text("endpoint_name").notNullable();
    t.timestamp("minute", { useTz: true }).notNullable();
    t.integer("requests").notNullable().defaultTo(0);
    t.bigInteger("prompt_tokens").notNullable().defaultTo(0);
    t.bigInteger("completion_tokens").notNullable().defaultTo(0);
    t.bigInteger("spend_micros").notNullable().defaultTo(0);
    t.bigInteger("machine_cost_micros").notNullable().defaultTo(0);
    t.integer("estimated").notNullable().defaultTo(0);
    t.jsonb("refused").notNullable().defaultTo("{}");
    // Each process writes its own absolute counts of a minute (a write retried counts nothing twice).
    t.text("process_id").notNullable().defaultTo("");
    t.primary(["key_name", "endpoint_name", "minute", "process_id"]);
    // The usage read: one key over a window, every endpoint; pruning: by age.
    t.index(["key_name", "minute"]);
    t.index(["minute"]);
  });
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.double("token_input_per_mtok");
    t.double("token_output_per_mtok");
  });
  await knex.raw(
    "alter table gpu_endpoints add constraint gpu_endpoints_token_price check ((token_input_per_mtok is null) = (token_output_per_mtok is null) and coalesce(token_input_per_mtok, 0) >= 0 and coalesce(token_output_per_mtok, 0) >= 0)",
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw("alter table gpu_endpoints drop constraint gpu_endpoints_token_price");
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.dropColumn("token_output_per_mtok");
    t.dropColumn("token_input_per_mtok");
  });
  await knex.schema.dropTable("gpu_key_usage_minutes");
  await knex.schema.dropTable("gpu_keys");
  await knex.raw("drop sequence gpu_keys_version");
}
