import type { Logger } from "pino";
import { OperationFailedError } from "../../../errors.js";
import { createEndpointLimiter, createJsonHttp, type JsonAnswer } from "../http/json-http.js";
import type { RateWaitCounter } from "../http/rate-waits.js";

// vast.ai's calls (docs/marketplace-vastai.md) over the shared JSON client. vast.ai limits each API
// key per endpoint as a minimum interval between calls and answers 429 ("API requests too
// frequent") without a Retry-After. So every call waits for its endpoint's slot in a client-side
// limiter, and a 429 is retried with exponential backoff and jitter. Other transient failures
// (5xx, network, timeout) are retried only for calls that are safe to repeat: a create that may
// have reached vast.ai is never sent twice.

export interface VastHttpOptions {
  baseUrl: string;
  apiKey: string;
  /** Per attempt, headers and body. */
  timeoutMs: number;
  /** Minimum interval between two calls of one endpoint, ms, for all; undefined: VAST_INTERVALS_MS. */
  minIntervalMs: number | undefined;
  /** Retries after the first attempt. */
  retries: number;
  /** First backoff step, ms; doubles each retry up to maxBackoffMs. */
  backoffMs: number;
  maxBackoffMs: number;
  /** Counts the calls' waits for vast.ai's rate limits (the market's metrics). */
  rateWaits?: RateWaitCounter;
  logger?: Logger;
}

export type VastAnswer = JsonAnswer;

export interface VastCall {
  /** The endpoint as vast.ai names it, e.g. "PUT /api/v0/asks/{id}/": the limiter's key. */
  endpoint: string;
  method: string;
  path: string;
  query?: Record<string, unknown>;
  body?: unknown;
  /** False for a create: sent again only after a 429, which vast.ai answers before doing anything. */
  repeatable: boolean;
  /** Per attempt, instead of timeoutMs (a create). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export type VastHttp = (call: VastCall) => Promise<VastAnswer>;

/**
 * vast.ai's minimum interval per endpoint and identity, ms, as its API reference states them
 * (the `threshold` of each endpoint's rate limit): create 4.5 s, destroy 3 s, show 2 s, the
 * instance list 1 s; search about 10 a minute. A call inside the interval answers 429, which can
 * extend the lock-out, so the limiter keeps them by default.
 */
export const VAST_INTERVALS_MS: Readonly<Record<string, number>> = {
  "PUT /api/v0/asks/{id}/": 4_500,
  "DELETE /api/v0/instances/{id}/": 3_000,
  "GET /api/v0/instances/{id}/": 2_000,
  "GET /api/v1/instances/": 1_000,
  "POST /api/v0/bundles/": 6_000,
  // change_bid.yaml's threshold.
  "PUT /api/v0/instances/bid_price/{id}/": 5_500,
};
const OTHER_ENDPOINT_MS = 1_000;
/**
 * vast.ai measures the interval between arrivals: two calls sent exactly one interval apart can
 * arrive closer when the first travelled slower, answer 429 and extend the lock-out. Intervals
 * vast.ai states (documented or named by a 429) are kept with this share on top.
 */
export const INTERVAL_MARGIN = 0.1;
const withMargin = (ms: number) => Math.round(ms * (1 + INTERVAL_MARGIN));

/** The interval a 429 names: "API requests too frequent endpoint threshold=4.5" -> 4500 ms. */
export function thresholdMsOf(body: unknown): number | undefined {
  const text = typeof body === "string" ? body : vastErrorMessage(body);
  const seconds = Number(/threshold=(\d+(?:\.\d+)?)/.exec(text ?? "")?.[1]);
  return Number.isFinite(seconds) && seconds > 0 ? Math.round(seconds * 1000) : undefined;
}

export function createVastHttp(options: VastHttpOptions): VastHttp {
  const limiter = createEndpointLimiter((endpoint) => options.minIntervalMs ?? withMargin(VAST_INTERVALS_MS[endpoint] ?? OTHER_ENDPOINT_MS));
  return createJsonHttp({
    name: "vast.ai",
    baseUrl: options.baseUrl,
    apiKey: options.apiKey,
    timeoutMs: options.timeoutMs,
    retries: options.retries,
    backoffMs: options.backoffMs,
    maxBackoffMs: options.maxBackoffMs,
    limiter,
    rateWaits: options.rateWaits,
    errorText: vastErrorMessage,
    // A 429 naming its threshold: wait that long, and keep that interval for the endpoint from now on.
    waitOf429: (body, endpoint) => {
      const threshold = thresholdMsOf(body);
      if (threshold === undefined) return undefined;
      limiter.widen(endpoint, withMargin(threshold));
      return withMargin(threshold);
    },
    logger: options.logger,
  });
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
