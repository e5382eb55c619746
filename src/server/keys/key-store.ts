import type { Knex } from "knex";
import { ConflictError, ResourceExhaustedError } from "../../errors.js";
import { BUDGET_DURATIONS_MS, type KeyLimits, type TokenPrice, tokenPrice } from "./allowance/limits.js";

// Keys for callers (table gpu_keys). Rows map to the records below here and nowhere else. Every
// write of what a directory holds takes the next `version` (the migration says why); last_used_at
// does not, so that traffic never reloads the directories.

const KEYS = "gpu_keys";
const NEXT_VERSION = "nextval('gpu_keys_version')";

export const BUDGET_DURATIONS = ["1h", "1d", "7d", "30d"] as const;
export type BudgetDuration = (typeof BUDGET_DURATIONS)[number];

/** What a caller sets on a key; null: no such limit (or no expiry). */
export interface KeySettings {
  /** The endpoints it may call; empty: every endpoint. */
  endpoints: readonly string[];
  maxBudgetMicros: number | null;
  budgetDuration: BudgetDuration | null;
  rpmLimit: number | null;
  tpmLimit: number | null;
  maxParallelRequests: number | null;
  expiresAt: Date | null;
}

export interface KeyRecord extends KeySettings {
  id: string;
  name: string;
  keyPrefix: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

export interface NewKey extends KeySettings {
  name: string;
  secretSha256: Buffer;
  keyPrefix: string;
}

/** A PATCH: undefined leaves a setting as it is. */
export type KeyChange = Partial<KeySettings>;

/** What each process's directory holds of a live key: enough to admit or refuse a bearer. */
export interface KeyEntry {
  name: string;
  secretSha256: Buffer;
  /** The secret before the last rotation, valid until previousValidUntil. */
  previousSha256: Buffer | null;
  previousValidUntil: Date | null;
  endpoints: readonly string[];
  hasBudget: boolean;
  expiresAt: Date | null;
  /** What its allowance needs: the key's id (stable over renames and rotations), limits and creation. */
  id: string;
  limits: KeyLimits;
  createdAt: Date;
}

/** What a directory polls: a stamp that moves with any write of a key, and the endpoints with a token price. */
export interface DirectoryStamp {
  stamp: string;
  /** The active endpoints with a token price, and the price. */
  prices: ReadonlyMap<string, TokenPrice>;
}

export interface KeyStore {
  /** Inserts a key; 409 when a live key has its name, 429 when `maxLive` keys are live already. */
  insert(key: NewKey, maxLive: number): Promise<KeyRecord>;
  /** The live key of that name, else its latest revoked one; null when there never was one. */
  getByName(name: string): Promise<KeyRecord | null>;
  /** Every key, revoked ones included, oldest first. */
  list(): Promise<KeyRecord[]>;
  /** Applies a change to a live key; null when it was revoked meanwhile. */
  update(id: string, change: KeyChange): Promise<KeyRecord | null>;
  /** A new secret for a live key; the current one stays valid `graceS` seconds. Null when revoked meanwhile. */
  rotate(id: string, secret: { sha256: Buffer; keyPrefix: string }, graceS: number): Promise<KeyRecord | null>;
  /** Revokes a key (idempotent: a revoked key keeps its revoked_at). */
  revoke(id: string): Promise<KeyRecord>;
  directoryStamp(): Promise<DirectoryStamp>;
  /** Every live key, for a directory's reload. */
  liveEntries(): Promise<KeyEntry[]>;
}

interface KeyRow {
  id: string;
  name: string;
  key_prefix: string;
  endpoints: string[];
  max_budget_micros: string | null;
  budget_duration: BudgetDuration | null;
  rpm_limit: number | null;
  tpm_limit: number | null;
  max_parallel_requests: number | null;
  expires_at: Date | null;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

/** What a key allows: its endpoints, limits and expiry (a record and a directory entry both read them). */
const ALLOWS_COLUMNS = [
  "endpoints",
  "max_budget_micros",
  "budget_duration",
  "rpm_limit",
  "tpm_limit",
  "max_parallel_requests",
  "expires_at",
];

const RECORD_COLUMNS = ["id", "name", "key_prefix", ...ALLOWS_COLUMNS, "created_at", "last_used_at", "revoked_at"];

function toKey(row: KeyRow): KeyRecord {
  return {
    id: String(row.id),
    name: row.name,
    keyPrefix: row.key_prefix,
    endpoints: row.endpoints ?? [],
    maxBudgetMicros: row.max_budget_micros === null ? null : Number(row.max_budget_micros),
    budgetDuration: row.budget_duration,
    rpmLimit: row.rpm_limit,
    tpmLimit: row.tpm_limit,
    maxParallelRequests: row.max_parallel_requests,
    expiresAt: row.expires_at,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    revokedAt: row.revoked_at,
  };
}

function settingColumns(change: KeyChange): Record<string, unknown> {
  const columns: Record<string, unknown> = {};
  if (change.endpoints !== undefined) columns.endpoints = change.endpoints;
  if (change.maxBudgetMicros !== undefined) columns.max_budget_micros = change.maxBudgetMicros;
  if (change.budgetDuration !== undefined) columns.budget_duration = change.budgetDuration;
  if (change.rpmLimit !== undefined) columns.rpm_limit = change.rpmLimit;
  if (change.tpmLimit !== undefined) columns.tpm_limit = change.tpmLimit;
  if (change.maxParallelRequests !== undefined) columns.max_parallel_requests = change.maxParallelRequests;
  if (change.expiresAt !== undefined) columns.expires_at = change.expiresAt;
  return columns;
}

/** PostgreSQL's unique_violation: a second live key with a name in use. */
const UNIQUE_VIOLATION = "23505";
/** The advisory lock that makes "count the live keys, then insert" one step across processes. */
const CREATE_LOCK = "select pg_advisory_xact_lock(hashtext('gpu_keys.create'))";

export class KnexKeyStore implements KeyStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): KnexKeyStore {
    return new KnexKeyStore(knex);
  }

  async insert(key: NewKey, maxLive: number): Promise<KeyRecord> {
    return this.knex.transaction(async (trx) => {
      await trx.raw(CREATE_LOCK);
      const { n } = (await trx(KEYS).whereNull("revoked_at").count({ n: "*" }).first()) as { n: string };
      if (Number(n) >= maxLive) {
        throw new ResourceExhaustedError(`${maxLive} keys are live already, the most there may be: revoke one first`, { extra: { live_keys: Number(n) } });
      }
      try {
        const [row] = await trx(KEYS)
          .insert({ name: key.name, secret_sha256: key.secretSha256, key_prefix: key.keyPrefix, ...settingColumns(key) })
          .returning(RECORD_COLUMNS);
        return toKey(row as KeyRow);
      } catch (err) {
        if ((err as { code?: string }).code === UNIQUE_VIOLATION) {
          throw new ConflictError(`Key '${key.name}' already exists`, { extra: { field: "name" } });
        }
        throw err;
      }
    });
  }

  async getByName(name: string): Promise<KeyRecord | null> {
    const row = await this.knex(KEYS).select(RECORD_COLUMNS).where({ name }).orderByRaw("(revoked_at is not null), revoked_at desc, id desc").first();
    return row ? toKey(row as KeyRow) : null;
  }

  async list(): Promise<KeyRecord[]> {
    const rows = await this.knex(KEYS).select(RECORD_COLUMNS).orderBy([{ column: "created_at" }, { column: "id" }]);
    return (rows as KeyRow[]).map(toKey);
  }

  async update(id: string, change: KeyChange): Promise<KeyRecord | null> {
    const [row] = await this.knex(KEYS)
      .where({ id })
      .whereNull("revoked_at")
      .update({ ...settingColumns(change), version: this.knex.raw(NEXT_VERSION) })
      .returning(RECORD_COLUMNS);
    return row ? toKey(row as KeyRow) : null;
  }

  async rotate(id: string, secret: { sha256: Buffer; keyPrefix: string }, graceS: number): Promise<KeyRecord | null> {
    const [row] = await this.knex(KEYS)
      .where({ id })
      .whereNull("revoked_at")
      .update({
        // With no grace the old secret is forgotten at once; with one, it is kept until then.
        previous_sha256: graceS > 0 ? this.knex.ref("secret_sha256") : null,
        previous_valid_until: graceS > 0 ? this.knex.raw("now() + ? * interval '1 second'", [graceS]) : null,
        secret_sha256: secret.sha256,
        key_prefix: secret.keyPrefix,
        version: this.knex.raw(NEXT_VERSION),
      })
      .returning(RECORD_COLUMNS);
    return row ? toKey(row as KeyRow) : null;
  }

  async revoke(id: string): Promise<KeyRecord> {
    const [row] = await this.knex(KEYS)
      .where({ id })
      .update({ revoked_at: this.knex.raw("coalesce(revoked_at, now())"), version: this.knex.raw(NEXT_VERSION) })
      .returning(RECORD_COLUMNS);
    return toKey(row as KeyRow);
  }

  async directoryStamp(): Promise<DirectoryStamp> {
    // Versions only grow, and every row counts (revoked ones too): the sum moves with every write,
    // whichever order concurrent writes commit in. The priced endpoints are few: read every time.
    const { rows } = await this.knex.raw<{ rows: Array<{ stamp: string; priced: string[] }> }>(
      `select (select coalesce(sum(version), 0)::text || ':' || count(*) from gpu_keys) as stamp,
              (select coalesce(json_agg(json_build_array(name, token_input_per_mtok, token_output_per_mtok)), '[]')
                 from gpu_endpoints where phase = 'active' and token_input_per_mtok is not null) as priced`,
    );
    const priced = rows[0]!.priced as unknown as Array<[string, number | string, number | string | null]>;
    const prices = new Map(priced.map(([name, input, output]) => [name, tokenPrice(Number(input), Number(output ?? 0))] as const));
    return { stamp: rows[0]!.stamp, prices };
  }

  async liveEntries(): Promise<KeyEntry[]> {
    const rows = await this.knex(KEYS)
      .select(
        "id",
        "name",
        "secret_sha256",
        "previous_sha256",
        "previous_valid_until",
        ...ALLOWS_COLUMNS,
        "created_at",
      )
      .whereNull("revoked_at");
    return rows.map((row) => ({
      name: row.name as string,
      secretSha256: row.secret_sha256 as Buffer,
      previousSha256: (row.previous_sha256 as Buffer | null) ?? null,
      previousValidUntil: (row.previous_valid_until as Date | null) ?? null,
      endpoints: (row.endpoints as string[]) ?? [],
      hasBudget: row.max_budget_micros !== null,
      expiresAt: (row.expires_at as Date | null) ?? null,
      id: String(row.id),
      limits: limitsOf(row as KeyRow),
      createdAt: row.created_at as Date,
    }));
  }
}

/** A key's limits as its allowance counts them; an absent setting is no limit. */
function limitsOf(row: Pick<KeyRow, "max_budget_micros" | "budget_duration" | "rpm_limit" | "tpm_limit" | "max_parallel_requests">): KeyLimits {
  return {
    ...(row.max_parallel_requests !== null && { maxParallel: row.max_parallel_requests }),
    ...(row.rpm_limit !== null && { rpm: row.rpm_limit }),
    ...(row.tpm_limit !== null && { tpm: row.tpm_limit }),
    ...(row.max_budget_micros !== null && { budgetMicros: Number(row.max_budget_micros) }),
    ...(row.budget_duration !== null && { budgetPeriodMs: BUDGET_DURATIONS_MS[row.budget_duration] }),
  };
}
