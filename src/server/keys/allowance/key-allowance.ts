import { type Estimate, type KeyLimits, budgetPeriod } from "./limits.js";
import { Meter } from "./meter.js";
import { type Bucket, type Measure, windowSum } from "./window.js";

// One key's allowance in one process: admission, "take more" for a streamed answer, settlement,
// and the lease reports that keep it within what the database granted (docs/keys.md,
// "Allowance"). Pure: the caller passes the clock and carries the reports to the database.

export type RefusalCode = "parallel_limit" | "rpm_limit" | "tpm_limit" | "budget_exceeded";

export type Dimension = "parallel" | "requests" | "tokens" | "micros";
export const DIMENSIONS: readonly Dimension[] = ["parallel", "requests", "tokens", "micros"];

/** Which limit each dimension is, in the order a refusal names them (a spent budget first). */
const CODES: ReadonlyArray<readonly [Dimension, RefusalCode]> = [
  ["micros", "budget_exceeded"],
  ["parallel", "parallel_limit"],
  ["requests", "rpm_limit"],
  ["tokens", "tpm_limit"],
];

/** What one answer holds; a streamed answer's hold grows as it takes more. */
export interface Hold {
  readonly epoch: number;
  tokens: number;
  micros: number;
}

const NO_WINDOW = Object.freeze({ sum: 0, last: -Infinity });
/** A used key's lease is renewed about this often; its units are sized to twice this of demand. */
const RENEW_REFERENCE_MS = 1_000;

export type Admission = { readonly admitted: true; readonly hold: Hold } | { readonly admitted: false; readonly code: RefusalCode };
export type Take = { readonly taken: true } | { readonly taken: false; readonly code: RefusalCode };

export type Amounts = Readonly<Record<Dimension, number>>;

/**
 * What a process tells the database: used since its last report, and the lease it wants now: what
 * is in flight (`keep`) plus `units` times one request's ask (`unit`). The database grants whole
 * units, so that no lease holds a part of one limit that it cannot use for lack of another.
 */
export interface LeaseReport {
  readonly epoch: number;
  /** requests, tokens and micros used; parallel is never reported (it ends with its answers). */
  readonly used: Amounts;
  readonly keep: Amounts;
  readonly unit: Amounts;
  readonly units: number;
  /** Start of the budget period the spend belongs to, ms. */
  readonly periodStartsAt: number;
}

/** What the database answered: the lease, and the key's figures for a caller's headers. */
export interface LeaseGrant {
  /** null where the key has no such limit. */
  readonly granted: Readonly<Record<Dimension, number | null>>;
  /** The database's clock, ms, when it answered. */
  readonly dbNowMs: number;
  readonly buckets: readonly Bucket[];
  /** Leased by other processes. */
  readonly others: Amounts;
  /** The period's spend, micro-dollars. */
  readonly spent: number;
}

export interface KeyAllowanceOptions {
  limits: KeyLimits;
  readonly createdAtMs: number;
  /** How long the database keeps a lease unrenewed, ms. */
  readonly leaseTtlMs: number;
  /** How much sooner than the database this process takes its lease for gone (clock rates differ), ms. */
  readonly leaseMarginMs: number;
}

export class KeyAllowance {
  readonly meters: Readonly<Record<Dimension, Meter>>;
  /** Admissions asked for since the last report, admitted or not. */
  asked = 0;
  /** Bumped when a lease lapses: holds of an older epoch were counted with it. */
  epoch = 0;
  /** Local clock after which the lease may no longer be used, ms. */
  validUntilMs = -Infinity;
  /** The last answer of the database, and its clock minus ours. */
  lastGrant: LeaseGrant | undefined;
  clockOffsetMs = 0;
  private readonly windows: Partial<Record<Measure, { grant: LeaseGrant; second: number; sum: number; last: number }>> = {};
  /** When the last report left, and the most units a report wanted. */
  private lastReportAt = -Infinity;
  mostWanted = 0;
  /** Per limit, half of what the lease left free when granted: below it, renew ahead of need. */
  private readonly lowWater: Record<Dimension, number> = { parallel: -Infinity, requests: -Infinity, tokens: -Infinity, micros: -Infinity };

  readonly options: KeyAllowanceOptions;

  constructor(options: KeyAllowanceOptions) {
    this.options = { ...options };
    const { limits } = options;
    this.meters = {
      parallel: new Meter(limits.maxParallel),
      requests: new Meter(limits.rpm),
      tokens: new Meter(limits.tpm),
      micros: new Meter(limits.budgetMicros),
    };
  }

  /** A PATCH of the key: what is in flight stays counted; the database applies the new limits at the next renewal. */
  setLimits(limits: KeyLimits): void {
    this.options.limits = limits;
    this.meters.parallel.setLimit(limits.maxParallel);
    this.meters.requests.setLimit(limits.rpm);
    this.meters.tokens.setLimit(limits.tpm);
    this.meters.micros.setLimit(limits.budgetMicros);
  }

  /** Whether this key needs the database at all. */
  get limited(): boolean {
    return DIMENSIONS.some((d) => this.meters[d].limited);
  }

  /** A request holds one place, one request of the minute, and its estimate; all or nothing. */
  admit(estimate: Estimate, nowMs: number): Admission {
    const asks: Amounts = { parallel: 1, requests: 1, tokens: estimate.tokens, micros: estimate.micros };
    this.asked += 1;
    for (const d of DIMENSIONS) this.meters[d].ask(asks[d]);
    const short = this.shortOf(asks, nowMs);
    if (short !== undefined) return { admitted: false, code: short };
    this.meters.parallel.held += 1;
    this.meters.requests.pending += 1;
    this.meters.tokens.held += estimate.tokens;
    this.meters.micros.held += estimate.micros;
    return { admitted: true, hold: { epoch: this.epoch, tokens: estimate.tokens, micros: estimate.micros } };
  }

  /** A streamed answer past its hold takes more per event; refused, it must end now. */
  takeMore(hold: Hold, tokens: number, micros: number, nowMs: number): Take {
    if (hold.epoch !== this.epoch) return { taken: false, code: this.meters.micros.limited ? "budget_exceeded" : "tpm_limit" };
    // Each take asks like a request of its size: a stream past its hold doubles its room per renewal.
    this.asked += 1;
    this.meters.tokens.ask(tokens);
    this.meters.micros.ask(micros);
    const short = this.shortOf({ parallel: 0, requests: 0, tokens, micros }, nowMs);
    if (short !== undefined) return { taken: false, code: short };
    hold.tokens += tokens;
    hold.micros += micros;
    this.meters.tokens.held += tokens;
    this.meters.micros.held += micros;
    return { taken: true };
  }

  /** The answer ended: its hold becomes what it used (more than held counts too: it was delivered). */
  settle(hold: Hold, usedTokens: number, usedMicros: number): void {
    if (hold.epoch !== this.epoch) return;
    this.meters.parallel.held -= 1;
    this.meters.tokens.held -= hold.tokens;
    this.meters.tokens.pending += usedTokens;
    this.meters.micros.held -= hold.micros;
    this.meters.micros.pending += usedMicros;
  }

  /**
   * The next report: room for twice the admissions asked for since the last one, each the size of
   * the largest; an idle key, or `giveBack` (the process stops), wants only what is in flight. Of
   * those units, as many as the lease still has free are kept (`keep`, a reserve): the database
   * grants them whatever the other processes took, so admissions go on while the report travels.
   */
  startReport(nowMs: number, giveBack = false): LeaseReport {
    const keep = {} as Record<Dimension, number>;
    const unit = {} as Record<Dimension, number>;
    const used = {} as Record<Dimension, number>;
    // About two seconds of the demand: renewed sooner than each second (its lease ran low), the
    // asks since the last report came faster.
    const sinceLastMs = Math.max(RENEW_REFERENCE_MS / 2, Math.min(RENEW_REFERENCE_MS, nowMs - this.lastReportAt));
    const wanted = giveBack ? 0 : Math.ceil((2 * this.asked * RENEW_REFERENCE_MS) / sinceLastMs);
    this.lastReportAt = nowMs;
    if (wanted > this.mostWanted) this.mostWanted = wanted;
    let reserved = nowMs < this.validUntilMs ? wanted : 0;
    for (const d of DIMENSIONS) {
      const meter = this.meters[d];
      unit[d] = meter.limited ? meter.largestAsk : 0;
      if (unit[d] > 0) reserved = Math.min(reserved, Math.floor(Math.max(0, meter.free) / unit[d]));
    }
    for (const d of DIMENSIONS) {
      const meter = this.meters[d];
      const reserve = reserved * unit[d];
      keep[d] = meter.limited ? meter.held + reserve : 0;
      meter.largestAsk = 0;
      used[d] = meter.startReport(reserve);
    }
    const units = wanted - reserved;
    this.asked = 0;
    const periodStartsAt = budgetPeriod(this.options.createdAtMs, this.options.limits.budgetPeriodMs, nowMs + this.clockOffsetMs).startsAt;
    return { epoch: this.epoch, used, keep, unit, units, periodStartsAt };
  }

  /**
   * Whether to renew before a request finds the lease short: less than half of what it left free
   * when granted is left in some limit, or less than half of its time.
   */
  wantsRenewal(nowMs: number): boolean {
    // Without a lease there is nothing to renew ahead: a request that needs one asks for it.
    if (!(nowMs < this.validUntilMs)) return false;
    if (this.validUntilMs - nowMs < this.options.leaseTtlMs / 2) return true;
    for (const d of DIMENSIONS) if (this.meters[d].free < this.lowWater[d]) return true;
    return false;
  }

  /** The database renewed the lease; `sentAtMs` is when the report left (the lease runs from no earlier). */
  reportDone(grant: LeaseGrant, sentAtMs: number, nowMs: number): void {
    for (const d of DIMENSIONS) {
      const meter = this.meters[d];
      meter.reportDone(grant.granted[d]);
      this.lowWater[d] = meter.limited ? meter.free / 2 : -Infinity;
    }
    this.validUntilMs = sentAtMs + this.options.leaseTtlMs - this.options.leaseMarginMs;
    this.lastGrant = grant;
    this.clockOffsetMs = grant.dbNowMs - nowMs;
  }

  reportFailed(): void {
    for (const d of DIMENSIONS) this.meters[d].reportFailed();
  }

  /** Past `validUntilMs` unrenewed: the database counts the whole lease as used; start afresh. */
  lapse(): void {
    this.epoch += 1;
    this.validUntilMs = -Infinity;
    for (const d of DIMENSIONS) {
      this.meters[d].lapse();
      this.lowWater[d] = -Infinity;
    }
  }

  /**
   * The last answer's window at `dbNowMs` for one measure: its counted sum and the last second with
   * a use in it. The same for every answer of that second of that grant, so figured once.
   */
  windowOf(measure: Measure, dbNowMs: number): { readonly sum: number; readonly last: number } {
    const grant = this.lastGrant;
    if (grant === undefined) return NO_WINDOW;
    const second = Math.floor(dbNowMs / 1000);
    const cached = this.windows[measure];
    if (cached !== undefined && cached.grant === grant && cached.second === second) return cached;
    let last = -Infinity;
    for (const bucket of grant.buckets) if (bucket[measure] > 0 && bucket.second > last) last = bucket.second;
    const figured = { grant, second, sum: windowSum(grant.buckets, measure, dbNowMs), last };
    this.windows[measure] = figured;
    return figured;
  }

  /** Nothing in flight, nothing to report, nothing asked: the lease can be given back. */
  get idle(): boolean {
    return this.asked === 0 && DIMENSIONS.every((d) => this.meters[d].used === 0);
  }

  /**
   * The limit a refusal names. Leases are granted in whole units of every limit at once, so a lease
   * short of one is short of all: it names the first limit the key itself lacks room in by the
   * database's last answer (a budget half spent is not named when tpm_limit is what is full). When
   * none does (the room is in another process's lease, the lease awaits its renewal, the last
   * answer is older than what filled the key), the first of the minute's limits its lease lacks:
   * a spent budget, which OpenAI's clients never retry, is named only when the key's own figures
   * say so or the budget is its only short limit.
   */
  private shortOf(asks: Amounts, nowMs: number): RefusalCode | undefined {
    const leased = nowMs < this.validUntilMs;
    let first: RefusalCode | undefined;
    let budgetShort = false;
    for (const [d, code] of CODES) {
      const meter = this.meters[d];
      if (asks[d] > 0 && meter.limited && (!leased || !meter.fits(asks[d]))) {
        if (this.keyLacks(d, asks[d], nowMs)) return code;
        if (d === "micros") budgetShort = true;
        else first ??= code;
      }
    }
    return first ?? (budgetShort ? "budget_exceeded" : undefined);
  }

  /** Whether the key has no room for `ask` in limit `d`: the window or the period's spend, the other processes' leases and this one's use. */
  private keyLacks(d: Dimension, ask: number, nowMs: number): boolean {
    const grant = this.lastGrant;
    const limit = this.meters[d].limit;
    if (grant === undefined || limit === undefined) return false;
    const counted = d === "micros" ? grant.spent : d === "parallel" ? 0 : windowSum(grant.buckets, d, nowMs + this.clockOffsetMs);
    return counted + grant.others[d] + this.meters[d].used + ask > limit;
  }
}
