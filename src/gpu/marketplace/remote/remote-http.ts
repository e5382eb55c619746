import type { Logger } from "pino";
import { OperationFailedError } from "../../../errors.js";
import { createJsonHttp } from "../http/json-http.js";
import { errorMessage } from "./remote-wire.js";

// The remote marketplace's calls (docs/marketplace-api.md) over the shared JSON client: every call
// of the contract is safe to repeat (creates carry an Idempotency-Key), so every call is retried
// alike on 429, 5xx, network errors and timeouts. Answers the adapter does not interpret (a
// refused key, any other error status, a body that is not JSON) become domain errors here.

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

export function createMarketplaceHttp(options: MarketplaceHttpOptions): MarketplaceHttp {
  const http = createJsonHttp({
    name: "The marketplace",
    baseUrl: options.baseUrl,
    apiKey: options.apiKey,
    timeoutMs: options.timeoutMs,
    retries: options.retries,
    backoffMs: options.backoffMs ?? 200,
    maxBackoffMs: options.maxBackoffMs ?? 5_000,
    maxRetryAfterMs: options.maxRetryAfterMs,
    logger: options.logger,
  });
  return async (method, path, call = {}) => {
    const answer = await http({ method, path, body: call.body, headers: call.headers, signal: call.signal });
    return check(answer, call.accept ?? []);
  };
}

function check(answer: HttpAnswer, accept: readonly number[]): HttpAnswer {
  const { status, body } = answer;
  if (typeof body === "string") throw new OperationFailedError("The marketplace sent an answer that is not JSON");
  if ((status >= 200 && status < 300) || accept.includes(status)) return answer;
  if (status === 401 || status === 403) {
    throw new OperationFailedError(`The marketplace refused the API key (HTTP ${status}); check MARKETPLACE_API_KEY`, {
      extra: { code: "MARKETPLACE_AUTH_REFUSED" },
    });
  }
  const message = errorMessage(body);
  throw new OperationFailedError(`The marketplace rejected the request (HTTP ${status})${message ? `: ${message}` : ""}`);
}
