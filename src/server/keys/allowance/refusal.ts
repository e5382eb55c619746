import type { Amounts, KeyAllowance, RefusalCode } from "./key-allowance.js";
import { budgetPeriod } from "./limits.js";
import { type Measure, WINDOW_S, secondsUntilRoom } from "./window.js";

// What a refused caller is told, and the figures of OpenAI's x-ratelimit-* headers, from the
// database's last answer and this process's own use. Pure.

export interface Refusal {
  readonly code: RefusalCode;
  /** OpenAI's error type. */
  readonly type: "rate_limit_exceeded" | "insufficient_quota";
  /** Whole seconds until enough frees; undefined when nothing will (a budget that never resets). */
  readonly retryAfterS: number | undefined;
}

/** Why `asks` was refused and when to come back. */
export function refusal(allowance: KeyAllowance, code: RefusalCode, asks: Amounts, nowMs: number): Refusal {
  const dbNow = nowMs + allowance.clockOffsetMs;
  if (code === "budget_exceeded") {
    const { limits, createdAtMs } = allowance.options;
    const spent = allowance.lastGrant?.spent ?? 0;
    const { resetsAt } = budgetPeriod(createdAtMs, limits.budgetPeriodMs, dbNow);
    // Spent already: only the next period frees it. Held by answers in flight: they end soon.
    const spentOut = spent + asks.micros > (limits.budgetMicros ?? 0);
    const retryAfterS = !spentOut ? 1 : resetsAt === undefined ? undefined : Math.max(1, Math.ceil((resetsAt - dbNow) / 1000));
    return { code, type: "insufficient_quota", retryAfterS };
  }
  if (code === "parallel_limit") return { code, type: "rate_limit_exceeded", retryAfterS: 1 };
  const measure: Measure = code === "rpm_limit" ? "requests" : "tokens";
  const limit = measure === "requests" ? allowance.options.limits.rpm : allowance.options.limits.tpm;
  const grant = allowance.lastGrant;
  if (limit === undefined || grant === undefined) return { code, type: "rate_limit_exceeded", retryAfterS: 1 };
  const mine = allowance.meters[measure].used;
  const retryAfterS = secondsUntilRoom(grant.buckets, measure, dbNow, limit, grant.others[measure] + mine, asks[measure]);
  return { code, type: "rate_limit_exceeded", retryAfterS };
}

export interface RateLimitFigure {
  readonly limit: number;
  readonly remaining: number;
  /** Until the window holds nothing counted, ms. */
  readonly resetMs: number;
}

/** The figures behind x-ratelimit-{limit,remaining,reset}-{requests,tokens}; a measure without a limit is absent. */
export function rateLimitFigures(allowance: KeyAllowance, nowMs: number): { requests?: RateLimitFigure; tokens?: RateLimitFigure } {
  const figures: { requests?: RateLimitFigure; tokens?: RateLimitFigure } = {};
  const { rpm, tpm } = allowance.options.limits;
  if (rpm !== undefined) figures.requests = figure(allowance, "requests", rpm, nowMs);
  if (tpm !== undefined) figures.tokens = figure(allowance, "tokens", tpm, nowMs);
  return figures;
}

function figure(allowance: KeyAllowance, measure: Measure, limit: number, nowMs: number): RateLimitFigure {
  const grant = allowance.lastGrant;
  const dbNow = nowMs + allowance.clockOffsetMs;
  const mine = allowance.meters[measure].used;
  if (grant === undefined) return { limit, remaining: Math.max(0, limit - mine), resetMs: 0 };
  const { sum, last } = allowance.windowOf(measure, dbNow);
  const used = sum + grant.others[measure] + mine;
  const resetMs = Number.isFinite(last) ? Math.max(0, (last + WINDOW_S + 1) * 1000 - dbNow) : 0;
  return { limit, remaining: Math.max(0, limit - used), resetMs };
}

/** A duration as OpenAI writes it in x-ratelimit-reset-*: "1s", "6m0s", "20ms". */
export function openAiDuration(ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const s = Math.ceil(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`;
}
