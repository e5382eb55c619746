import type { Knex } from "knex";
import type { LeaseGrant, LeaseReport } from "./allowance/key-allowance.js";
import type { KeyLimits } from "./allowance/limits.js";

// The keys' leases in PostgreSQL (migration 20261129030000_gpu_key_leases): one statement per
// renewal, gpu_key_lease_renew, which reports a process's use and sizes its lease under the key's
// row lock. Rows and the function's answer map here and nowhere else.

export interface LeaseStore {
  /** Reports `report` for `holder` and answers its new lease; a lease of nothing is given back. */
  renew(keyId: string, holder: string, limits: KeyLimits, report: LeaseReport, ttlMs: number): Promise<LeaseGrant>;
}

interface RenewAnswer {
  granted: Record<"parallel" | "requests" | "tokens" | "micros", string | number | null>;
  now_ms: string | number;
  buckets: Array<[string | number, string | number, string | number]>;
  others: Record<"parallel" | "requests" | "tokens" | "micros", string | number>;
  spent: string | number;
}

export class KnexLeaseStore implements LeaseStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): KnexLeaseStore {
    return new KnexLeaseStore(knex);
  }

  async renew(keyId: string, holder: string, limits: KeyLimits, report: LeaseReport, ttlMs: number): Promise<LeaseGrant> {
    const { used, keep, unit } = report;
    const result = await this.knex.raw<{ rows: Array<{ answer: RenewAnswer }> }>(
      "select gpu_key_lease_renew(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) as answer",
      [
        keyId,
        holder,
        ttlMs,
        new Date(report.periodStartsAt),
        used.requests,
        used.tokens,
        used.micros,
        keep.parallel,
        keep.requests,
        keep.tokens,
        keep.micros,
        unit.parallel,
        unit.requests,
        unit.tokens,
        unit.micros,
        report.units,
        limits.maxParallel ?? null,
        limits.rpm ?? null,
        limits.tpm ?? null,
        limits.budgetMicros ?? null,
      ],
    );
    return toGrant(result.rows[0]!.answer);
  }
}

const orNull = (value: string | number | null): number | null => (value === null ? null : Number(value));

function toGrant(answer: RenewAnswer): LeaseGrant {
  const { granted, others } = answer;
  return {
    granted: { parallel: orNull(granted.parallel), requests: orNull(granted.requests), tokens: orNull(granted.tokens), micros: orNull(granted.micros) },
    dbNowMs: Number(answer.now_ms),
    buckets: answer.buckets.map(([second, requests, tokens]) => ({ second: Number(second), requests: Number(requests), tokens: Number(tokens) })),
    others: { parallel: Number(others.parallel), requests: Number(others.requests), tokens: Number(others.tokens), micros: Number(others.micros) },
    spent: Number(answer.spent),
  };
}
