import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { OperationFailedError, UnavailableError } from "../../../errors.js";
import { jitter, networkReason } from "../http/retry-timing.js";

// HTTP calls to vast.ai (docs/marketplace-vastai.md). vast.ai limits each API key per endpoint as
// a minimum interval between calls and answers 429 ("API requests too frequent") without a
// Retry-After. So every call waits for its endpoint's slot in a client-side limiter, and a 429 is
// retried with exponential backoff and jitter. Other transient failures (5xx, network, timeout)
// are retried only for calls that are safe to repeat: a create that may have reached vast.ai is
// never sent twice. The API key goes into the Authorization header and nowhere else.

export interface VastHttpOptions {
  baseUrl: string;
  apiKey: string;
  /** Per attempt, headers and body. */
  timeoutMs: number;
  /** Minimum interval between two calls of one endpoint, ms. */
  minIntervalMs: number;
  /** Retries after the first attempt. */
  retries: number;
  /** First backoff step, ms; doubles each retry up to maxBackoffMs. */
  backoffMs: number;
  maxBackoffMs: number;
  logger?: Logger;
}

export interface VastAnswer {
  status: number;
  /** Parsed JSON, or the text when the body is not JSON. */
  body: unknown;
}

export interface VastCall {
  /** The endpoint as vast.ai names it, e.g. "PUT /api/v0/asks/{id}/": the limiter's key. */
  endpoint: string;
  method: string;
  path: string;
  query?: Record<string, unknown>;
  body?: unknown;
  /** False for a create: sent again only after a 429, which vast.ai answers before doing anything. */
  repeatable: boolean;
  signal?: AbortSignal;
}

export type VastHttp = (call: VastCall) => Promise<VastAnswer>;

const TRANSIENT_STATUSES = new Set([500, 502, 503, 504]);

export function createVastHttp(options: VastHttpOptions): VastHttp {
  const limiter = createEndpointLimiter(options.minIntervalMs);
  const base = options.baseUrl.replace(/\/+$/, "");

  async function attempt(call: VastCall): Promise<VastAnswer | { failure: string }> {
    const timeout = AbortSignal.timeout(options.timeoutMs);
    const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
    try {
      const res = await fetch(urlOf(base, call), {
        method: call.method,
        signal,
        headers: {
          authorization: `Bearer ${options.apiKey}`,
          accept: "application/json",
          ...(call.body !== undefined && { "content-type": "application/json" }),
        },
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
      });
      return { status: res.status, body: parseBody(await res.text()) };
    } catch (err) {
      if (call.signal?.aborted) throw call.signal.reason;
      return { failure: timeout.aborted ? `no answer within ${options.timeoutMs} ms` : networkReason(err) };
    }
  }

  return async (call) => {
    for (let attemptNo = 0; ; attemptNo++) {
      await limiter(call.endpoint, call.signal);
      const outcome = await attempt(call);
      const what = "failure" in outcome ? outcome.failure : `HTTP ${outcome.status}`;
      const retryable =
        "failure" in outcome
          ? call.repeatable
          : outcome.status === 429 || (call.repeatable && TRANSIENT_STATUSES.has(outcome.status));
      if (!retryable) {
        if ("failure" in outcome || TRANSIENT_STATUSES.has(outcome.status)) {
          throw new UnavailableError(`vast.ai is unavailable: ${what}${bodyText(outcome)}`);
        }
        return outcome;
      }
      if (attemptNo >= options.retries) {
        throw new UnavailableError(`vast.ai is unavailable: ${what}${bodyText(outcome)} (${attemptNo + 1} attempts)`);
      }
      const delayMs = jitter(Math.min(options.maxBackoffMs, options.backoffMs * 2 ** attemptNo));
      options.logger?.warn({ endpoint: call.endpoint, attempt: attemptNo + 1, outcome: what, delay_ms: delayMs }, "vast.ai call retried");
      await sleep(delayMs, undefined, call.signal ? { signal: call.signal } : undefined);
    }
  };
}

/**
 * One slot per endpoint every minIntervalMs: callers of a busy endpoint queue up in call order,
 * other endpoints are not held back.
 */
export function createEndpointLimiter(minIntervalMs: number): (endpoint: string, signal?: AbortSignal) => Promise<void> {
  const nextFree = new Map<string, number>();
  return async (endpoint, signal) => {
    const now = Date.now();
    const slot = Math.max(now, nextFree.get(endpoint) ?? 0);
    nextFree.set(endpoint, slot + minIntervalMs);
    if (slot > now) await sleep(slot - now, undefined, signal ? { signal } : undefined);
  };
}

/** The human-readable part of a vast.ai error body: `msg`, `message`, `detail`, `error`, or the text. */
export function vastErrorMessage(body: unknown): string | undefined {
  if (typeof body === "string") return body.trim().slice(0, 300) || undefined;
  if (typeof body !== "object" || body === null) return undefined;
  const o = body as Record<string, unknown>;
  const text = [o.msg, o.message, o.detail, o.error].find((v) => typeof v === "string" && v !== "");
  return typeof text === "string" ? text.slice(0, 300) : undefined;
}

/** The machine-readable `error` of a vast.ai error body (e.g. "no_such_ask"). */
export function vastErrorCode(body: unknown): string | undefined {
  const error = typeof body === "object" && body !== null ? (body as Record<string, unknown>).error : undefined;
  return typeof error === "string" ? error : undefined;
}

/** Non-2xx answers nobody interpreted: authentication first, then the rest. */
export function unexpectedAnswer(answer: VastAnswer, what: string): OperationFailedError {
  const message = vastErrorMessage(answer.body);
  if (answer.status === 401 || answer.status === 403) {
    return new OperationFailedError(`vast.ai refused the API key (HTTP ${answer.status}); check VAST_API_KEY`, {
      extra: { code: "MARKETPLACE_AUTH_REFUSED" },
    });
  }
  return new OperationFailedError(`vast.ai did not ${what} (HTTP ${answer.status})${message ? `: ${message}` : ""}`);
}

/** vast.ai takes query arguments as JSON values, strings as they are (as its CLI sends them). */
function urlOf(base: string, call: VastCall): string {
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

function bodyText(outcome: VastAnswer | { failure: string }): string {
  const message = "failure" in outcome ? undefined : vastErrorMessage(outcome.body);
  return message ? ` (${message})` : "";
}
