// A key's limits and what one request holds against them, in integers: tokens, and money in
// micro-dollars (SPEC.md section 2, "Keys for callers"). Pure: no clock of its own.

/** The limits of one key; an absent limit does not apply. */
export interface KeyLimits {
  /** max_parallel_requests: answers in flight, a held request counting. */
  readonly maxParallel?: number;
  /** rpm_limit: requests admitted in any 60 s. */
  readonly rpm?: number;
  /** tpm_limit: prompt and completion tokens in any 60 s. */
  readonly tpm?: number;
  /** max_budget, micro-dollars: the period's spend plus what answers in flight hold. */
  readonly budgetMicros?: number;
  /** budget_duration, ms: periods start at the key's creation; absent: the budget never resets. */
  readonly budgetPeriodMs?: number;
}

export const BUDGET_DURATIONS_MS: Readonly<Record<string, number>> = Object.freeze({
  "1h": 3_600_000,
  "1d": 86_400_000,
  "7d": 7 * 86_400_000,
  "30d": 30 * 86_400_000,
});

/** An endpoint's token price in integer micro-dollars per million tokens. */
export interface TokenPrice {
  readonly inputMicrosPerMtok: number;
  readonly outputMicrosPerMtok: number;
}

/** A price in dollars per million tokens (the endpoint's `token_price`), as integers. */
export function tokenPrice(inputPerMtok: number, outputPerMtok: number): TokenPrice {
  return { inputMicrosPerMtok: Math.round(inputPerMtok * 1e6), outputMicrosPerMtok: Math.round(outputPerMtok * 1e6) };
}

/** What tokens cost, micro-dollars, rounded up: a hold or a charge is never below the price. */
export function costMicros(price: TokenPrice | undefined, promptTokens: number, completionTokens: number): number {
  if (price === undefined) return 0;
  return Math.ceil((promptTokens * price.inputMicrosPerMtok + completionTokens * price.outputMicrosPerMtok) / 1_000_000);
}

/** What a request asks for, as the proxy reads it from the body. */
export interface RequestShape {
  readonly promptChars: number;
  /** max_tokens, or else max_completion_tokens. */
  readonly maxTokens?: number;
}

/** What a request holds at admission, in tokens and in micro-dollars. */
export interface Estimate {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly tokens: number;
  readonly micros: number;
}

/** The hold of a request: its prompt's characters / 4 plus its max_tokens (else `holdTokens`). */
export function estimate(request: RequestShape, holdTokens: number, price: TokenPrice | undefined): Estimate {
  const promptTokens = Math.ceil(request.promptChars / 4);
  const completionTokens = request.maxTokens ?? holdTokens;
  return { promptTokens, completionTokens, tokens: promptTokens + completionTokens, micros: costMicros(price, promptTokens, completionTokens) };
}

/** The budget period holding `nowMs`: it starts at the key's creation and repeats; one period forever without a duration. */
export function budgetPeriod(createdAtMs: number, periodMs: number | undefined, nowMs: number): { startsAt: number; resetsAt: number | undefined } {
  if (periodMs === undefined) return { startsAt: createdAtMs, resetsAt: undefined };
  const startsAt = createdAtMs + Math.max(0, Math.floor((nowMs - createdAtMs) / periodMs)) * periodMs;
  return { startsAt, resetsAt: startsAt + periodMs };
}

/** Whether any limit applies: a key without one never needs the database. */
export function hasLimits(limits: KeyLimits): boolean {
  return limits.maxParallel !== undefined || limits.rpm !== undefined || limits.tpm !== undefined || limits.budgetMicros !== undefined;
}
