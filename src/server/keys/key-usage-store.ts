import type { Knex } from "knex";
import { DEFAULT_READ_TIMEOUT_MS, readWithTimeout } from "../../db/read-timeout.js";
import type { KeyUsageEntry } from "../../module.js";
import { attributeMachineCostSql } from "./machine-cost-sql.js";

// What keys used (table gpu_key_usage_minutes): a row per key, endpoint and minute, written by
// the proxy in batches, their machine cost set by the sync leader's sampler each minute, summed
// here in SQL for the usage read and each key's budget period, and pruned with the endpoints'
// history. Money in micro-dollars, tokens as integers. Rows map here and nowhere else.

const USAGE = "gpu_key_usage_minutes";

/** Usage summed over some minutes. */
export interface UsageTotals {
  requests: number;
  promptTokens: number;
  completionTokens: number;
  spendMicros: number;
  machineCostMicros: number;
}

/** One step of the usage read: its start, its totals and its refusals by reason. */
export interface UsagePoint extends UsageTotals {
  at: Date;
  refused: Record<string, number>;
}

export interface UsageQuery {
  keyName: string;
  /** Minutes from this one on. */
  from: Date;
  /** minute: one point a minute; hour: one an hour. */
  step: "minute" | "hour";
  endpointName?: string;
}

export interface KeyUsageStore {
  /**
   * Writes one process's minutes as they stand (absolute counts: writing one twice changes
   * nothing), their spend priced at each endpoint's token_price as it is now.
   */
  publish(processId: string, entries: readonly KeyUsageEntry[]): Promise<void>;
  /** The steps of the query that hold usage, oldest first. */
  points(query: UsageQuery): Promise<UsagePoint[]>;
  /** Each key's totals from the minute holding its period's start on (key name -> totals; keys with none left out). */
  periodTotals(periods: ReadonlyArray<{ keyName: string; from: Date }>): Promise<Map<string, UsageTotals>>;
  /**
   * Sets the machine cost of the minutes in [from, to): each endpoint's billed machine dollars of
   * a minute split by token share (machine-cost-sql.ts). The number of rows changed.
   */
  attributeMachineCost(from: Date, to: Date): Promise<number>;
  /** Deletes the minutes older than `before`; the number deleted. */
  prune(before: Date): Promise<number>;
}

const TOTALS = `sum(requests)::bigint as requests, sum(prompt_tokens)::bigint as prompt_tokens,
  sum(completion_tokens)::bigint as completion_tokens, sum(spend_micros)::bigint as spend_micros,
  sum(machine_cost_micros)::bigint as machine_cost_micros`;

// The key's minutes within the window only (the index on key_name, minute), summed per step;
// refusals summed reason by reason.
const POINTS_SQL = `
  with rows as (
    select date_trunc(:step, minute) as at, * from ${USAGE}
    where key_name = :keyName and minute >= :from and (:endpointName::text is null or endpoint_name = :endpointName)
  ),
  sums as (select at, ${TOTALS} from rows group by at),
  reasons as (
    select at, r.key as reason, sum(r.value::bigint) as n from rows, jsonb_each_text(rows.refused) as r group by at, r.key
  ),
  refusals as (select at, jsonb_object_agg(reason, n) as refused from reasons group by at)
  select sums.*, coalesce(refusals.refused, '{}'::jsonb) as refused
  from sums left join refusals using (at)
  order by at`;

// A period's first minute counts whole: the minute rows cannot tell which of its seconds came first.
const PERIODS_SQL = `
  select p.key_name, ${TOTALS}
  from unnest(:names::text[], :froms::timestamptz[]) as p(key_name, starts_at)
  join ${USAGE} u on u.key_name = p.key_name and u.minute > p.starts_at - interval '1 minute'
  group by p.key_name`;

const ATTRIBUTE_SQL = attributeMachineCostSql(USAGE);

// One statement for a process's minutes: spend in micro-dollars is tokens x dollars per million
// tokens (one dollar per million tokens is one micro-dollar per token), at the price of the
// endpoint of that name (the live one, else the latest deleted); unpriced: 0. The same statement
// moves each live key's last_used_at to its latest answer (a static token has no row to move).
const PUBLISH_SQL = `
  with usage as (
    select * from jsonb_to_recordset(:rows::jsonb) as u(key_name text, endpoint_name text, minute timestamptz, requests int,
         prompt_tokens bigint, completion_tokens bigint, estimated int, refused jsonb, last_answered_at timestamptz)
  ),
  published as (
  insert into ${USAGE} (key_name, endpoint_name, minute, process_id, requests, prompt_tokens, completion_tokens, estimated, refused, spend_micros)
  select u.key_name, u.endpoint_name, u.minute, :processId, u.requests, u.prompt_tokens, u.completion_tokens, u.estimated, u.refused,
         coalesce(round(u.prompt_tokens * e.token_input_per_mtok + u.completion_tokens * e.token_output_per_mtok), 0)::bigint
  from usage u
  left join lateral (
    select token_input_per_mtok, token_output_per_mtok from gpu_endpoints g
    where g.name = u.endpoint_name order by (g.phase = 'deleted'), g.created_at desc limit 1
  ) e on true
  on conflict (key_name, endpoint_name, minute, process_id) do update set
    requests = excluded.requests, prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
    estimated = excluded.estimated, refused = excluded.refused, spend_micros = excluded.spend_micros
  ),
  used as (select key_name, max(last_answered_at) as at from usage where last_answered_at is not null group by key_name)
  update gpu_keys k set last_used_at = greatest(k.last_used_at, used.at)
  from used where k.name = used.key_name and k.revoked_at is null and used.at >= k.created_at`;

function totalsOf(row: Record<string, unknown>): UsageTotals {
  return {
    requests: Number(row.requests),
    promptTokens: Number(row.prompt_tokens),
    completionTokens: Number(row.completion_tokens),
    spendMicros: Number(row.spend_micros),
    machineCostMicros: Number(row.machine_cost_micros),
  };
}

export class KnexKeyUsageStore implements KeyUsageStore {
  private constructor(
    private readonly knex: Knex,
    private readonly readTimeoutMs: number,
  ) {}

  /** `readTimeoutMs`: API_READ_TIMEOUT_MS, the statement timeout of the reads. */
  static create({ knex, readTimeoutMs = DEFAULT_READ_TIMEOUT_MS }: { knex: Knex; readTimeoutMs?: number }): KnexKeyUsageStore {
    return new KnexKeyUsageStore(knex, readTimeoutMs);
  }

  async publish(processId: string, entries: readonly KeyUsageEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const rows = entries.map((e) => ({
      key_name: e.caller,
      endpoint_name: e.endpointName,
      minute: e.minute.toISOString(),
      requests: e.requests,
      prompt_tokens: e.promptTokens,
      completion_tokens: e.completionTokens,
      estimated: e.estimated,
      refused: e.refused,
      last_answered_at: e.lastAnsweredAt?.toISOString() ?? null,
    }));
    await this.knex.raw(PUBLISH_SQL, { processId, rows: JSON.stringify(rows) });
  }

  async points(query: UsageQuery): Promise<UsagePoint[]> {
    const { rows } = await readWithTimeout(this.knex, this.readTimeoutMs, (trx) =>
      trx.raw<{ rows: Array<Record<string, unknown>> }>(POINTS_SQL, {
        step: query.step,
        keyName: query.keyName,
        from: query.from,
        endpointName: query.endpointName ?? null,
      }),
    );
    return rows.map((row) => ({
      ...totalsOf(row),
      at: row.at as Date,
      refused: Object.fromEntries(Object.entries(row.refused as Record<string, string | number>).map(([reason, n]) => [reason, Number(n)])),
    }));
  }

  async periodTotals(periods: ReadonlyArray<{ keyName: string; from: Date }>): Promise<Map<string, UsageTotals>> {
    if (periods.length === 0) return new Map();
    const { rows } = await readWithTimeout(this.knex, this.readTimeoutMs, (trx) =>
      trx.raw<{ rows: Array<Record<string, unknown>> }>(PERIODS_SQL, {
        names: periods.map((p) => p.keyName),
        froms: periods.map((p) => p.from.toISOString()),
      }),
    );
    return new Map(rows.map((row) => [row.key_name as string, totalsOf(row)]));
  }

  async attributeMachineCost(from: Date, to: Date): Promise<number> {
    const { rowCount } = await this.knex.raw<{ rowCount: number | null }>(ATTRIBUTE_SQL, { from, to });
    return rowCount ?? 0;
  }

  async prune(before: Date): Promise<number> {
    return this.knex(USAGE).where("minute", "<", before).delete();
  }
}
