import type { Logger } from "pino";
import { type Amounts, type Hold, KeyAllowance, type Take } from "./allowance/key-allowance.js";
import { type Estimate, type KeyLimits, hasLimits } from "./allowance/limits.js";
import { type Refusal, rateLimitFigures, refusal } from "./allowance/refusal.js";
import type { LeaseStore } from "./lease-store.js";

// This process's allowances of every key it serves: the proxy's one admission, one settlement and
// "take more" per streamed event, all in memory, and the leases behind them renewed from
// PostgreSQL (docs/keys.md, "Allowance"). A key costs one statement a second while it is used, one
// more at most when its lease runs low or a request finds it short (never two within
// RENEW_GAP_MS), and one to give its lease back when idle.

/** A key as the proxy knows it: its stable id, its limits and when it was created. */
export interface KeyRef {
  readonly id: string;
  readonly limits: KeyLimits;
  readonly createdAtMs: number;
}

/** An admitted answer's share of its key: settle it exactly once. */
export interface Ticket {
  readonly keyId: string;
  readonly allowance: KeyAllowance | undefined;
  readonly hold: Hold;
  /**
   * Aborts when the lease behind the answer ran out unrenewed (the database lost): the database
   * then counts that lease as used and frees its places, so the answer must end now.
   */
  readonly signal: AbortSignal;
}

export type Admitted = { readonly admitted: true; readonly ticket: Ticket } | { readonly admitted: false; readonly refusal: Refusal };

export interface Allowances {
  admit(key: KeyRef, estimate: Estimate): Promise<Admitted>;
  /** A streamed answer past its hold: taken, or refused and the answer must end (why: the code). */
  takeMore(ticket: Ticket, tokens: number, micros: number): Take | Promise<Take>;
  settle(ticket: Ticket, usedTokens: number, usedMicros: number): void;
  /** The figures of the x-ratelimit-* headers for an answer of `key`. */
  figures(key: KeyRef): ReturnType<typeof rateLimitFigures>;
  /** Stops renewing and gives every lease back. */
  close(): Promise<void>;
}

export interface AllowancesOptions {
  readonly store: LeaseStore;
  /** This process, unique among the service's processes. */
  readonly processId: string;
  readonly logger: Logger;
  readonly renewMs?: number;
  readonly leaseTtlMs?: number;
  readonly now?: () => number;
}

/** Renewal interval of a used key's lease, ms. */
export const RENEW_MS = 1_000;
/** No two statements of one key within this long: at most two a second. */
export const RENEW_GAP_MS = 500;
/** A lease not renewed this long is the database's again: a dead process's lease is back within it. */
export const LEASE_TTL_MS = 5_000;
const LEASE_MARGIN_MS = 500;
/** How long a key forgotten when idle has its demand remembered, and for how many keys at most. */
const RECALL_MS = 60_000;
const RECALL_MAX = 10_000;
const TICK_MS = 50;

interface Entry {
  key: KeyRef;
  readonly allowance: KeyAllowance;
  /** When the last statement left or, once answered, ended. */
  lastSentAt: number;
  /** The renewal on its way, if any. */
  flight: Promise<void> | undefined;
  /** Waiting for a renewal that starts after they asked. */
  waiters: Array<() => void>;
  /** Aborted when the current epoch's lease lapses. */
  lapsed: AbortController;
}

const UNLIMITED_HOLD: Hold = Object.freeze({ epoch: 0, tokens: 0, micros: 0 });
const NEVER = new AbortController().signal;

const sameLimits = (a: KeyLimits, b: KeyLimits): boolean =>
  a.maxParallel === b.maxParallel && a.rpm === b.rpm && a.tpm === b.tpm && a.budgetMicros === b.budgetMicros && a.budgetPeriodMs === b.budgetPeriodMs;

export function createAllowances(options: AllowancesOptions): Allowances {
  const { store, processId, logger, renewMs = RENEW_MS, leaseTtlMs = LEASE_TTL_MS, now = Date.now } = options;
  const entries = new Map<string, Entry>();
  // What a key forgotten when idle wanted at most while in use: back within RECALL_MS, its first
  // lease is sized to that demand rather than to its first request alone (its callers coming back
  // then wait through no ramp of renewals).
  const recalled = new Map<string, { wanted: number; at: number }>();
  let failures = 0;

  const allowanceOf = (key: KeyRef): KeyAllowance =>
    new KeyAllowance({ limits: key.limits, createdAtMs: key.createdAtMs, leaseTtlMs, leaseMarginMs: LEASE_MARGIN_MS });

  const entryOf = (key: KeyRef): Entry => {
    let entry = entries.get(key.id);
    if (entry === undefined) {
      const allowance = allowanceOf(key);
      const last = recalled.get(key.id);
      if (last !== undefined) {
        recalled.delete(key.id);
        if (now() - last.at < RECALL_MS) allowance.asked = Math.ceil(last.wanted / 2);
      }
      entry = { key, allowance, lastSentAt: -Infinity, flight: undefined, waiters: [], lapsed: new AbortController() };
      entries.set(key.id, entry);
    } else if (!sameLimits(entry.key.limits, key.limits)) {
      entry.allowance.setLimits(key.limits);
      entry.key = key;
    }
    return entry;
  };

  const renew = (entry: Entry, giveBack = false): Promise<void> => {
    entry.flight = send(entry, giveBack).finally(() => {
      entry.flight = undefined;
    });
    return entry.flight;
  };

  const send = async (entry: Entry, giveBack: boolean): Promise<void> => {
    const { allowance } = entry;
    const sentAt = now();
    const epoch = allowance.epoch;
    const report = allowance.startReport(sentAt, giveBack);
    const waiters = entry.waiters.splice(0);
    entry.lastSentAt = sentAt;
    try {
      const grant = await store.renew(entry.key.id, `${processId}:${epoch}`, allowance.options.limits, report, leaseTtlMs);
      // A lease that lapsed while the answer travelled was counted in full; its answer is void.
      if (allowance.epoch === epoch) allowance.reportDone(grant, sentAt, now());
      if (failures > 0) logger.info({ key: entry.key.id }, "key leases renew again");
      failures = 0;
    } catch (err) {
      if (allowance.epoch === epoch) allowance.reportFailed();
      if (failures++ === 0) logger.warn({ err, key: entry.key.id }, "a key's lease could not be renewed; its answers stop when the lease runs out");
    }
    // The gap between statements counts from the end of this one: never two within RENEW_GAP_MS.
    entry.lastSentAt = now();
    // A key nobody uses gave its lease back with this report: forget it until its next request.
    const gaveBack = report.units === 0 && Object.values(report.keep).every((k) => k === 0);
    if (gaveBack && allowance.idle && entry.waiters.length === 0 && entries.get(entry.key.id) === entry) {
      entries.delete(entry.key.id);
      if (recalled.size >= RECALL_MAX) recalled.clear();
      if (!giveBack) recalled.set(entry.key.id, { wanted: allowance.mostWanted, at: now() });
    }
    for (const wake of waiters) wake();
  };

  // A used key renews every renewMs; sooner (never within RENEW_GAP_MS of its last statement) when
  // a request waits, or ahead of need when its lease runs low, in the background: one at a time.
  const due = (entry: Entry, at: number): boolean =>
    entry.flight === undefined &&
    at - entry.lastSentAt >= (entry.waiters.length > 0 || entry.allowance.wantsRenewal(at) ? RENEW_GAP_MS : renewMs);

  const tick = (): void => {
    const at = now();
    for (const entry of entries.values()) {
      if (Number.isFinite(entry.allowance.validUntilMs) && at >= entry.allowance.validUntilMs) {
        entry.allowance.lapse();
        entry.lapsed.abort(new Error("the key's lease ran out unrenewed"));
        entry.lapsed = new AbortController();
      }
      if (due(entry, at)) void renew(entry);
    }
  };
  const timer = setInterval(tick, TICK_MS);
  timer.unref();

  /** Resolves when the renewal on its way has answered, or else the next one. */
  const nextRenewal = (entry: Entry): Promise<void> =>
    entry.flight ??
    new Promise((resolve) => {
      entry.waiters.push(resolve);
      if (due(entry, now())) void renew(entry);
    });

  const asks = (estimate: Estimate): Amounts => ({ parallel: 1, requests: 1, tokens: estimate.tokens, micros: estimate.micros });

  return {
    async admit(key, estimate) {
      if (!hasLimits(key.limits)) return { admitted: true, ticket: { keyId: key.id, allowance: undefined, hold: UNLIMITED_HOLD, signal: NEVER } };
      const entry = entryOf(key);
      // Short of lease: the renewal on its way may bring enough, else the next one (this ask sizes it).
      let admission = entry.allowance.admit(estimate, now());
      for (let tries = 0; !admission.admitted && tries < 2; tries++) {
        await nextRenewal(entry);
        admission = entry.allowance.admit(estimate, now());
      }
      if (admission.admitted) {
        const at = now();
        if (due(entry, at)) void renew(entry);
        return { admitted: true, ticket: { keyId: key.id, allowance: entry.allowance, hold: admission.hold, signal: entry.lapsed.signal } };
      }
      return { admitted: false, refusal: refusal(entry.allowance, admission.code, asks(estimate), now()) };
    },

    takeMore(ticket, tokens, micros) {
      const { allowance, hold } = ticket;
      if (allowance === undefined) return { taken: true };
      const take = allowance.takeMore(hold, tokens, micros, now());
      const entry = entries.get(ticket.keyId);
      if (take.taken || hold.epoch !== allowance.epoch || entry?.allowance !== allowance) return take;
      return nextRenewal(entry).then(() => allowance.takeMore(hold, tokens, micros, now()));
    },

    settle(ticket, usedTokens, usedMicros) {
      ticket.allowance?.settle(ticket.hold, usedTokens, usedMicros);
    },

    figures(key) {
      return rateLimitFigures(entries.get(key.id)?.allowance ?? allowanceOf(key), now());
    },

    async close() {
      clearInterval(timer);
      const leased = [...entries.values()].filter((e) => Number.isFinite(e.allowance.validUntilMs) || e.flight !== undefined);
      await Promise.all(
        leased.map(async (entry) => {
          await entry.flight;
          await renew(entry, true);
        }),
      );
      entries.clear();
    },
  };
}
