import { setTimeout as sleep } from "node:timers/promises";
import { UnavailableError } from "../../../errors.js";

// RunPod's rate limits, kept on the client side (docs/marketplace-runpod.md). Every answer carries
// `RateLimit-Policy` ("minute";q=60;w=60, ...: the quota of each window) and `RateLimit`
// ("minute";r=12;t=30, ...: requests left, seconds until the window resets). While more than half
// of a window's quota is left, calls go at once; below that, the calls left are spread evenly over
// the time until the reset, so a busy caller (a 1-second status sync) is slowed to fit instead of
// running into 429s. Before the first answer has told the quota, calls go one at a time. A 429
// pauses every call with the key until its Retry-After has passed.

export interface RateWindow {
  /** Quota of the window and its length, ms, when RateLimit-Policy said them. */
  quota?: number;
  lengthMs?: number;
  remaining: number;
  /** When the window resets, ms since the epoch. */
  resetAt: number;
}

export interface RunpodRateLimiter {
  /** Waits for this call's turn; throws UnavailableError when RunPod asked to wait longer than maxWaitMs. */
  wait(signal?: AbortSignal): Promise<void>;
  /** Reads an answer's rate-limit headers (and a 429's Retry-After). */
  observe(status: number, headers: Headers): void;
  /** Until when a 429 asked every call to wait; undefined when it has passed. */
  pausedUntil(): Date | undefined;
}

/**
 * `maxWaitMs`: the longest a 429 may pause a call before it answers 503 instead; `firstAnswerMs`:
 * until RunPod's first answer has told the quota, calls go one at a time, each waiting at most
 * this long (a call's timeout) for that answer, so that a cold burst does not overrun the quota.
 */
export function createRunpodRateLimiter(maxWaitMs: number, firstAnswerMs: number, now: () => number = () => Date.now()): RunpodRateLimiter {
  const windows = new Map<string, RateWindow>();
  let answered = false;
  let firstSent = false;
  let released: () => void = () => undefined;
  const firstAnswer = new Promise<void>((resolve) => (released = resolve));
  let pauseUntil = 0;
  let nextFree = 0;
  let queue: Promise<void> = Promise.resolve();

  /** The gap to keep after a call sent now, so that no window runs out before it resets. */
  function spacing(at: number): number {
    let gap = 0;
    for (const window of windows.values()) {
      if (at >= window.resetAt) continue;
      const left = window.resetAt - at;
      if (window.quota !== undefined && window.remaining > window.quota / 2) continue;
      gap = Math.max(gap, window.remaining > 0 ? left / window.remaining : left);
    }
    return Math.ceil(gap);
  }

  async function untilFirstAnswer(signal?: AbortSignal): Promise<void> {
    const done = new AbortController();
    try {
      await Promise.race([firstAnswer, sleep(firstAnswerMs, undefined, { signal: signal ? AbortSignal.any([signal, done.signal]) : done.signal })]);
    } finally {
      done.abort();
    }
  }

  async function turn(signal?: AbortSignal): Promise<void> {
    if (!answered && firstSent) await untilFirstAnswer(signal);
    firstSent = true;
    // Answers arriving meanwhile (a 429) can move the turn later: look again after each wait.
    for (let at = now(); Math.max(nextFree, pauseUntil) > at; at = now()) {
      if (pauseUntil - at > maxWaitMs) {
        throw new UnavailableError(`RunPod is rate limited: it asked to wait until ${new Date(pauseUntil).toISOString()}`);
      }
      await sleep(Math.max(nextFree, pauseUntil) - at, undefined, signal ? { signal } : undefined);
    }
    const sent = now();
    for (const window of windows.values()) {
      // A window past its reset starts again with its full quota until an answer says otherwise.
      if (sent >= window.resetAt && window.quota !== undefined && window.lengthMs !== undefined) {
        Object.assign(window, { remaining: window.quota, resetAt: sent + window.lengthMs });
      }
      if (sent < window.resetAt) window.remaining--;
    }
    nextFree = sent + spacing(sent);
  }

  return {
    wait(signal) {
      // Calls take their turns in order: a paused or spaced key holds every caller behind it.
      const mine = queue.then(() => turn(signal));
      queue = mine.catch(() => undefined);
      return mine;
    },
    observe(status, headers) {
      const at = now();
      answered = true;
      released();
      const policy = parseStructuredList(headers.get("ratelimit-policy"));
      for (const [name, params] of parseStructuredList(headers.get("ratelimit"))) {
        const remaining = params.r;
        const seconds = params.t;
        if (remaining === undefined || seconds === undefined) continue;
        const resetAt = at + seconds * 1000;
        const known = windows.get(name);
        // Answers to calls sent together arrive in any order: within one window the lowest count
        // left is the truth (calls sent since are not in the answer yet); a new window starts afresh.
        const sameWindow = known !== undefined && at < known.resetAt && resetAt < known.resetAt + 1000;
        const { q: quota, w: lengthS } = policy.get(name) ?? {};
        windows.set(name, {
          quota,
          lengthMs: lengthS !== undefined ? lengthS * 1000 : undefined,
          remaining: sameWindow ? Math.min(known.remaining, remaining) : remaining,
          resetAt,
        });
      }
      if (status === 429) {
        const retryAfter = Number(headers.get("retry-after"));
        const minute = windows.get("minute");
        const waitMs = Number.isInteger(retryAfter) && retryAfter >= 0 ? retryAfter * 1000 : minute ? minute.resetAt - at : 1000;
        pauseUntil = Math.max(pauseUntil, at + waitMs);
      }
      nextFree = Math.max(nextFree, at + spacing(at));
    },
    pausedUntil: () => (pauseUntil > now() ? new Date(pauseUntil) : undefined),
  };
}

/**
 * A structured-field list as RunPod sends these headers: `"minute";r=0;t=12, "hour";r=2800;t=1812`
 * -> minute -> {r: 0, t: 12}, ... Members or parameters it cannot read are left out.
 */
export function parseStructuredList(value: string | null): Map<string, Record<string, number>> {
  const found = new Map<string, Record<string, number>>();
  for (const member of (value ?? "").split(",")) {
    const [rawName, ...rawParams] = member.split(";").map((part) => part.trim());
    const name = rawName?.replace(/^"(.*)"$/, "$1");
    if (!name) continue;
    const params: Record<string, number> = {};
    for (const param of rawParams) {
      const [key, raw] = param.split("=");
      const number = Number(raw);
      if (key && raw !== undefined && Number.isFinite(number)) params[key.trim()] = number;
    }
    found.set(name, params);
  }
  return found;
}
