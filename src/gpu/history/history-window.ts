import { InvalidInputError } from "../../errors.js";

// The time window of a history read (SPEC.md section 5, "History"): `from` and `to` (default the
// last hour), and the step of its points, 60 s or a multiple of it (default: at most 1,440
// points). Bad input is a 400 naming the field.

export interface HistoryWindow {
  from: Date;
  to: Date;
  stepS: number;
}

export const DEFAULT_WINDOW_MS = 3_600_000;
/** A default step gives at most this many points. */
export const MAX_DEFAULT_POINTS = 1_440;
/** A step given by the caller may give up to this many: a week of minutes. */
export const MAX_POINTS = 10_080;
/**
 * `from` may reach this much further back than HISTORY_DAYS: a browser whose clock runs a little
 * behind the service's still asks for "the last 7 days" without a 400.
 */
export const CLOCK_GRACE_MS = 300_000;

export function historyWindow(req: { from?: Date; to?: Date; stepS?: number }, historyDays: number, now = new Date()): HistoryWindow {
  const to = req.to === undefined || req.to > now ? now : req.to;
  const from = req.from ?? new Date(to.getTime() - DEFAULT_WINDOW_MS);
  if (from > to) throw bad("to", `to (${to.toISOString()}) is before from (${from.toISOString()})`);
  const oldest = now.getTime() - historyDays * 86_400_000;
  if (from.getTime() < oldest - CLOCK_GRACE_MS) {
    throw bad("from", `from reaches further back than the history kept (HISTORY_DAYS: ${historyDays} days, since ${new Date(oldest).toISOString()})`);
  }
  const windowS = (to.getTime() - from.getTime()) / 1000;
  // Whole minutes: "the last 7 days", asked a few milliseconds before this moment, is 7 days.
  if (req.stepS === undefined) return { from, to, stepS: 60 * Math.max(1, Math.ceil(Math.round(windowS / 60) / MAX_DEFAULT_POINTS)) };
  const stepS = req.stepS;
  if (!Number.isInteger(stepS) || stepS <= 0 || stepS % 60 !== 0) throw bad("step_s", `step_s must be 60 or a multiple of 60, got ${stepS}`);
  if (windowS / stepS > MAX_POINTS) throw bad("step_s", `step_s ${stepS} gives more than ${MAX_POINTS} points over this window; take a larger step`);
  return { from, to, stepS };
}

function bad(field: string, message: string): InvalidInputError {
  return new InvalidInputError(message, { extra: { field } });
}
