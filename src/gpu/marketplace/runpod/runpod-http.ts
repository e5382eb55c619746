import type { Logger } from "pino";
import { MarketBlockedError, OperationFailedError, UnavailableError } from "../../../errors.js";
import { createJsonHttp, type JsonAnswer, type JsonCall } from "../http/json-http.js";
import { createRateWaitCounter, type RateWaitCounter } from "../http/rate-waits.js";
import { createRunpodHealth, type RunpodHealth } from "./runpod-health.js";
import { createRunpodRateLimiter } from "./runpod-rate.js";
import { runpodErrorText } from "./runpod-wire.js";

// RunPod's calls (docs/marketplace-runpod.md) over the shared JSON client, with RunPod's own rate
// limiter (runpod-rate.ts) and its transport's health (runpod-health.ts). A refused key (401) or an
// empty balance (402) is thrown as MarketBlockedError, which markets/market-health.ts keeps as the
// market's blocked state. 5xx, timeouts and dropped connections are retried for reads; a create
// is never sent twice by this layer.

export interface RunpodHttpOptions {
  baseUrl: string;
  apiKey: string;
  /** Per attempt, headers and body. */
  timeoutMs: number;
  /** Retries of a read after the first attempt. */
  retries: number;
  /** First backoff step, ms (doubles each retry up to 8x). */
  backoffMs: number;
  logger?: Logger;
}

export type RunpodCall = Omit<JsonCall, "endpoint"> & { endpoint: string };

export interface RunpodHttp {
  (call: RunpodCall): Promise<JsonAnswer>;
  readonly health: RunpodHealth;
  /** The calls' waits for RunPod's rate limits (the market's metrics). */
  readonly rateWaits: RateWaitCounter;
}

/** The longest a call waits for RunPod's rate limit (a 429's Retry-After) before answering 503. */
export const MAX_RATE_WAIT_MS = 30_000;

export function createRunpodHttp(options: RunpodHttpOptions): RunpodHttp {
  const limiter = createRunpodRateLimiter(MAX_RATE_WAIT_MS, options.timeoutMs);
  const health = createRunpodHealth(() => limiter.pausedUntil());
  const rateWaits = createRateWaitCounter();
  const json = createJsonHttp({
    name: "RunPod",
    baseUrl: options.baseUrl,
    apiKey: options.apiKey,
    timeoutMs: options.timeoutMs,
    retries: options.retries,
    backoffMs: options.backoffMs,
    maxBackoffMs: options.backoffMs * 8,
    maxRetryAfterMs: MAX_RATE_WAIT_MS,
    limiter: (_endpoint, signal) => limiter.wait(signal),
    rateWaits,
    onAnswer: (_endpoint, status, headers) => limiter.observe(status, headers),
    errorText: runpodErrorText,
    logger: options.logger,
  });

  const call = async (request: RunpodCall): Promise<JsonAnswer> => {
    let answer: JsonAnswer;
    try {
      answer = await json(request);
    } catch (err) {
      if (err instanceof UnavailableError) health.failed(err.message);
      throw err;
    }
    if (answer.status === 401 || answer.status === 402) {
      const why = refusalOf(answer);
      options.logger?.error({ marketplace: "runpod", endpoint: request.endpoint, status: answer.status }, why);
      // A refused key is a configuration error naming RUNPOD_API_KEY (500), as vast.ai's is; no balance, the market's state (503).
      if (answer.status === 401) throw new OperationFailedError(why, { extra: { code: "MARKETPLACE_AUTH_REFUSED" } });
      throw new MarketBlockedError(why, { extra: { code: "MARKETPLACE_BLOCKED" } });
    }
    if (answer.status >= 500) {
      health.failed(`HTTP ${answer.status}`);
      return answer;
    }
    health.succeeded();
    return answer;
  };
  return Object.assign(call, { health, rateWaits });
}

function refusalOf(answer: JsonAnswer): string {
  const detail = runpodErrorText(answer.body);
  return answer.status === 401
    ? `RunPod refused the API key (HTTP 401${detail ? `: ${detail}` : ""}); check RUNPOD_API_KEY`
    : `RunPod refused for lack of balance (HTTP 402${detail ? `: ${detail}` : ""}); add funds to the RunPod account`;
}

/** An answer nobody interpreted, naming RunPod's own words. */
export function unexpectedAnswer(answer: JsonAnswer, what: string): OperationFailedError {
  const detail = runpodErrorText(answer.body);
  return new OperationFailedError(`RunPod did not ${what} (HTTP ${answer.status})${detail ? `: ${detail}` : ""}`);
}

/** An answer that does not read as RunPod documents it: the operation fails as unavailable (503). */
export function unreadable(health: RunpodHealth, err: unknown): never {
  if (!(err instanceof OperationFailedError)) throw err;
  health.failed(err.message);
  throw new UnavailableError(err.message, { cause: err });
}
