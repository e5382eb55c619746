import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { OperationFailedError, UnavailableError } from "../../../errors.js";
import { errorMessage } from "./remote-wire.js";
import { jitter, networkReason } from "../http/retry-timing.js";

// HTTP JSON calls to the remote marketplace with the retry rules of docs/marketplace-api.md: a
// timeout per attempt, retries with backoff on network errors, timeouts, 429 and 5xx (honouring
// Retry-After), and failures turned into domain errors. Every call of the contract is safe to
// repeat (creates carry an Idempotency-Key), so every call is retried alike.
//
// The API key goes into the Authorization header and nowhere else: not into logs, not into errors.

export interface MarketplaceHttpOptions {
  baseUrl: string;
  apiKey: string;
  /** Per attempt, headers and body. */
  timeoutMs: number;
  /** Retries after the first attempt. */
  retries: number;
  /** First backoff step; doubles each retry. */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** A Retry-After longer than this is not waited for. */
  maxRetryAfterMs?: number;
  logger?: Logger;
}

export interface HttpAnswer {
  status: number;
  body: unknown;
}

export interface CallOptions {
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Non-2xx statuses the caller interprets itself (404, 409). */
  accept?: readonly number[];
}

export type MarketplaceHttp = (method: string, path: string, options?: CallOptions) => Promise<HttpAnswer>;

const RETRYABLE = new Set([429, 500, 502, 503, 504]);

/** What an attempt ended with when it is worth another try. */
type Transient = { kind: "status"; status: number; retryAfterMs: number | undefined } | { kind: "network"; reason: string };

export function createMarketplaceHttp(options: MarketplaceHttpOptions): MarketplaceHttp {
  const { baseUrl, apiKey, timeoutMs, retries, logger } = options;
  const backoffMs = options.backoffMs ?? 200;
  const maxBackoffMs = options.maxBackoffMs ?? 5000;
  const maxRetryAfterMs = options.maxRetryAfterMs ?? 30_000;

  async function attempt(method: string, url: URL, call: CallOptions): Promise<HttpAnswer | Transient> {
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
    try {
      const res = await fetch(url, {
        method,
        signal,
        headers: {
          authorization: `Bearer ${apiKey}`,
          accept: "application/json",
          ...(call.body !== undefined && { "content-type": "application/json" }),
          ...call.headers,
        },
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
      });
      const text = await res.text();
      if (RETRYABLE.has(res.status)) {
        return { kind: "status", status: res.status, retryAfterMs: parseRetryAfter(res.headers.get("retry-after")) };
      }
      return { status: res.status, body: parseJson(text) };
    } catch (err) {
      if (call.signal?.aborted) throw call.signal.reason;
      if (timeout.aborted) return { kind: "network", reason: `no answer within ${timeoutMs} ms` };
      return { kind: "network", reason: networkReason(err) };
    }
  }

  return async (method, path, call = {}) => {
    const url = new URL(path.replace(/^\//, ""), baseUrl.endsWith("/") ? baseUrl : `${baseUrl}/`);
    for (let attemptNo = 0; ; attemptNo++) {
      const outcome = await attempt(method, url, call);
      if (!("kind" in outcome)) return check(outcome, call.accept ?? []);
      const what = outcome.kind === "status" ? `HTTP ${outcome.status}` : outcome.reason;
      const waitMs = outcome.kind === "status" ? outcome.retryAfterMs : undefined;
      if (waitMs !== undefined && waitMs > maxRetryAfterMs) {
        throw new UnavailableError(`The marketplace is unavailable: ${what}, asked to retry after ${Math.ceil(waitMs / 1000)} s`);
      }
      if (attemptNo >= retries) {
        throw new UnavailableError(`The marketplace is unavailable: ${what} (${attemptNo + 1} attempts)`);
      }
      const delayMs = waitMs ?? jitter(Math.min(maxBackoffMs, backoffMs * 2 ** attemptNo));
      logger?.warn({ method, path: url.pathname, attempt: attemptNo + 1, outcome: what, delay_ms: delayMs }, "marketplace call retried");
      await sleep(delayMs, undefined, call.signal ? { signal: call.signal } : undefined);
    }
  };
}

function check(answer: HttpAnswer, accept: readonly number[]): HttpAnswer {
  const { status, body } = answer;
  if ((status >= 200 && status < 300) || accept.includes(status)) return answer;
  if (status === 401 || status === 403) {
    throw new OperationFailedError(`The marketplace refused the API key (HTTP ${status}); check MARKETPLACE_API_KEY`, {
      extra: { code: "MARKETPLACE_AUTH_REFUSED" },
    });
  }
  const message = errorMessage(body);
  throw new OperationFailedError(`The marketplace rejected the request (HTTP ${status})${message ? `: ${message}` : ""}`);
}

/** Retry-After in ms: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

function parseJson(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new OperationFailedError("The marketplace sent an answer that is not JSON");
  }
}
