import type { AnswerUsage } from "./answer-usage.js";

// What the proxy asks of a caller's limits on one request (a key's: server/keys/key-admission.ts).
// The proxy admits it once before a replica is chosen, ends it at once when refused, and settles
// it once when the answer ends, whatever way it ends.

/** Why a request or a streamed answer was refused, in OpenAI's shape. */
export interface AllowanceRefusal {
  readonly detail: string;
  readonly type: "rate_limit_exceeded" | "insufficient_quota";
  readonly code: string;
  /** retry-after, x-should-retry and the x-ratelimit-* figures. */
  readonly headers: Record<string, string>;
}

/** What a request asks for, as the proxy read it. */
export interface RequestAsk {
  /** The body's bytes (prompt characters / 4 estimate its tokens); 0: no body. */
  readonly bodyBytes: number;
  /** max_tokens, or else max_completion_tokens. */
  readonly maxTokens?: number;
  /** Only a completion holds tokens; any other request holds its place and one request. */
  readonly completion: boolean;
}

export interface CallerAllowance {
  /** Admits the request (undefined), or says why not; a second call (a held or requeued request) admits nothing more. */
  admit(ask: RequestAsk): Promise<AllowanceRefusal | undefined>;
  /** The x-ratelimit-* headers of an answer. */
  headers(): Record<string, string>;
  /** A streamed answer has used `usage` so far: undefined to go on, else why it must end now. */
  used(usage: AnswerUsage): AllowanceRefusal | undefined | Promise<AllowanceRefusal | undefined>;
  /** Aborts when the answer must end (its allowance lapsed); the reason is an AllowanceRefusal's detail. */
  readonly signal: AbortSignal;
  /** The answer ended having used `usage`; only the first call counts. */
  settle(usage: AnswerUsage): void;
}
