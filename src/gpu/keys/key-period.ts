import type { BudgetDuration } from "../../server/keys/key-store.js";

// A key's budget period (SPEC.md section 2, "Keys for callers"): periods start at the key's
// creation and follow each other every budget_duration; without one the period never ends.

const DURATION_MS: Readonly<Record<BudgetDuration, number>> = {
  "1h": 3_600_000,
  "1d": 86_400_000,
  "7d": 7 * 86_400_000,
  "30d": 30 * 86_400_000,
};

export interface KeyPeriodBounds {
  startsAt: Date;
  /** null: the budget never resets. */
  resetsAt: Date | null;
}

/** The period holding `now`. */
export function periodAt(createdAt: Date, duration: BudgetDuration | null, now: number): KeyPeriodBounds {
  if (duration === null) return { startsAt: createdAt, resetsAt: null };
  const length = DURATION_MS[duration];
  const start = createdAt.getTime() + Math.max(0, Math.floor((now - createdAt.getTime()) / length)) * length;
  return { startsAt: new Date(start), resetsAt: new Date(start + length) };
}
