import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { OutcomeUnknownError, UnavailableError } from "../../../errors.js";
import type { RateWaitCounter } from "./rate-waits.js";

// The one JSON-over-HTTP client of the marketplace adapters (remote, vast.ai, RunPod): a timeout
// per attempt, an optional limiter before each attempt, and retries with backoff and jitter.
//
// - 429 is always retried: the server did nothing. A Retry-After is honoured (one longer than
//   maxRetryAfterMs answers unavailable at once).
// - Transient 5xx (500, 502-504, Cloudflare's 520-524), network errors and timeouts are retried
//   only for a call that is safe to repeat: a create that may have reached the marketplace is never
//   sent twice unless the marketplace deduplicates. Retried to the end, they answer
//   UnavailableError (503). For a call that is not repeatable, every 5xx, network error and
//   timeout is OutcomeUnknownError: it may have done its work (lost-create.ts says what follows).
// - Any other answer goes back to the adapter, which says what it means.
//
// The API key goes into the Authorization header and nowhere else: not into logs, not into errors.

export interface JsonHttpOptions {
  /** Who is called, in messages: "The marketplace", "vast.ai". */
  name: string;
  baseUrl: string;
  apiKey: string;
  /** Per attempt, headers and body. */
  timeoutMs: number;
  /** Retries after the first attempt. */
  retries: number;
  /** First backoff step, ms; doubles each retry up to maxBackoffMs. */
  backoffMs: number;
  maxBackoffMs: number;
  /** A Retry-After longer than this is not waited for; default 30 s. */
  maxRetryAfterMs?: number;
  /** Waits for the call's turn before each attempt (vast.ai's per-endpoint minimum interval). */
  limiter?: (endpoint: string, signal?: AbortSignal) => Promise<void>;
  /** The readable part of an error body, added to the messages of unavailable answers. */
  errorText?: (body: unknown) => string | undefined;
  /** Sees every answer's status and headers as it arrives, 429s included (RunPod's `RateLimit` headers). */
  onAnswer?: (endpoint: string, status: number, headers: Headers) => void;
  /** Counts the time calls wait for the rate limit: the limiter's turns and 429s waited out. */
  rateWaits?: RateWaitCounter;
  /** How long a 429 asks to wait, when its body says so (vast.ai's `threshold=`), ms. */
  waitOf429?: (body: unknown, endpoint: string) => number | undefined;
  logger?: Logger;
}

export interface JsonCall {
  method: string;
  /** Appended to the base URL, e.g. "/v1/instances". */
  path: string;
  /** Query arguments: strings as they are, other values as JSON (how vast.ai's CLI sends them). */
  query?: Record<string, unknown>;
  body?: unknown;
  headers?: Record<string, string>;
  /** The limiter's key and the name in logs; default "METHOD path". */
  endpoint?: string;
  /** False for a call that must not be sent twice after an unknown outcome; default true. */
  repeatable?: boolean;
  /** Per attempt, instead of the client's timeoutMs (a create may take long). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface JsonAnswer {
  status: number;
  /** Parsed JSON; the text itself when the body is not JSON; undefined when empty. */
  body: unknown;
}

export type JsonHttp = (call: JsonCall) => Promise<JsonAnswer>;

/** Answers that say the server or its edge failed this once (Cloudflare's 520-524: the origin failed or timed out). */
const TRANSIENT_STATUSES = new Set([500, 502, 503, 504, 520, 521, 522, 523, 524]);

export function createJsonHttp(options: JsonHttpOptions): JsonHttp {
  const base = options.baseUrl.replace(/\/+$/, "");
  const maxRetryAfterMs = options.maxRetryAfterMs ?? 30_000;

  async function attempt(call: JsonCall, endpoint: string): Promise<{ answer: JsonAnswer; retryAfterMs?: number } | { failure: string }> {
    const timeoutMs = call.timeoutMs ?? options.timeoutMs;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
    try {
      const res = await fetch(urlOf(base, call), {
        method: call.method,
        signal,
        headers: {
          authorization: `Bearer ${options.apiKey}`,
          accept: "application/json",
          ...(call.body !== undefined && { "content-type": "application/json" }),
          ...call.headers,
        },
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
      });
      const answer = { status: res.status, body: parseBody(await res.text()) };
      options.onAnswer?.(endpoint, res.status, res.headers);
      return { answer, retryAfterMs: parseRetryAfter(res.headers.get("retry-after")) };
    } catch (err) {
      if (call.signal?.aborted) throw call.signal.reason;
      return { failure: timeout.aborted ? `no answer within ${timeoutMs} ms` : networkReason(err) };
    }
  }

  return async (call) => {
    const endpoint = call.endpoint ?? `${call.method} ${call.path}`;
    const repeatable = call.repeatable ?? true;
    for (let attemptNo = 0; ; attemptNo++) {
      if (options.limiter) {
        const askedAt = Date.now();
        await options.limiter(endpoint, call.signal);
        options.rateWaits?.waited(Date.now() - askedAt);
      }
      const outcome = await attempt(call, endpoint);
      const answer = "answer" in outcome ? outcome.answer : undefined;
      const what = answer ? `HTTP ${answer.status}` : (outcome as { failure: string }).failure;
      const detail = answer ? detailOf(options.errorText?.(answer.body)) : "";
      const transient = answer === undefined || TRANSIENT_STATUSES.has(answer.status);
      const retryable = answer?.status === 429 || (transient && repeatable);
      if (!retryable) {
        if (!repeatable && (answer === undefined || answer.status >= 500)) throw new OutcomeUnknownError(`${options.name} is unavailable: ${what}${detail}`);
        return answer!;
      }
      const asked = answer?.status === 429 ? options.waitOf429?.(answer.body, endpoint) : undefined;
      const retryAfterMs = "answer" in outcome ? (outcome.retryAfterMs ?? asked) : undefined;
      if (retryAfterMs !== undefined && retryAfterMs > maxRetryAfterMs) {
        throw new UnavailableError(`${options.name} is unavailable: ${what}, asked to retry after ${Math.ceil(retryAfterMs / 1000)} s`);
      }
      if (attemptNo >= options.retries) {
        throw new UnavailableError(`${options.name} is unavailable: ${what}${detail} (${attemptNo + 1} attempts)`);
      }
      const delayMs = retryAfterMs ?? jitter(Math.min(options.maxBackoffMs, options.backoffMs * 2 ** attemptNo));
      options.logger?.warn({ marketplace: options.name, endpoint, attempt: attemptNo + 1, outcome: what, delay_ms: delayMs }, "marketplace call retried");
      if (answer?.status === 429) options.rateWaits?.waited(delayMs);
      await sleep(delayMs, undefined, call.signal ? { signal: call.signal } : undefined);
    }
  };
}

export interface EndpointLimiter {
  /** Waits for the endpoint's next slot. */
  (endpoint: string, signal?: AbortSignal): Promise<void>;
  /** The server asked for a longer interval: the endpoint keeps at least this one from now on. */
  widen(endpoint: string, intervalMs: number): void;
}

/**
 * One slot per endpoint every interval (intervalOf(endpoint), ms): callers of a busy endpoint
 * queue up in call order, other endpoints are not held back. One limiter serves the whole process.
 */
export function createEndpointLimiter(intervalOf: (endpoint: string) => number): EndpointLimiter {
  const nextFree = new Map<string, number>();
  const widened = new Map<string, number>();
  const limiter = async (endpoint: string, signal?: AbortSignal) => {
    const now = Date.now();
    const slot = Math.max(now, nextFree.get(endpoint) ?? 0);
    nextFree.set(endpoint, slot + Math.max(intervalOf(endpoint), widened.get(endpoint) ?? 0));
    if (slot > now) await sleep(slot - now, undefined, signal ? { signal } : undefined);
  };
  return Object.assign(limiter, {
    widen(endpoint: string, intervalMs: number) {
      if (intervalMs > (widened.get(endpoint) ?? 0)) widened.set(endpoint, intervalMs);
      nextFree.set(endpoint, Math.max(nextFree.get(endpoint) ?? 0, Date.now() + intervalMs));
    },
  });
}

/** Retry-After in ms: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** Half to full of the step, so that many clients backing off together spread out. */
export function jitter(ms: number): number {
  return Math.round(ms / 2 + (Math.random() * ms) / 2);
}

/** "unreachable", with the system's error code when there is one (ECONNREFUSED, ...). */
function networkReason(err: unknown): string {
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
  const code = (cause as NodeJS.ErrnoException | undefined)?.code;
  return code ? `unreachable (${code})` : "unreachable";
}

function urlOf(base: string, call: JsonCall): string {
  const query = Object.entries(call.query ?? {})
    .map(([key, value]) => `${key}=${encodeURIComponent(typeof value === "string" ? value : JSON.stringify(value))}`)
    .join("&");
  return `${base}${call.path}${query ? `?${query}` : ""}`;
}

function parseBody(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function detailOf(text: string | undefined): string {
  return text ? ` (${text})` : "";
}
