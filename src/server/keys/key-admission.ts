import type { KeyUsage } from "../../module.js";
import type { Take } from "./allowance/key-allowance.js";
import { costMicros, estimate, type TokenPrice } from "./allowance/limits.js";
import { openAiDuration, type Refusal } from "./allowance/refusal.js";
import type { Allowances, KeyRef, Ticket } from "./allowances.js";
import type { KeyGrant } from "./key-directory.js";
import type { AnswerUsage } from "../proxy/answer-usage.js";
import type { AllowanceRefusal, CallerAllowance, RequestAsk } from "../proxy/caller-allowance.js";

// The glue between the proxy and a key's allowance (docs/keys.md, "In the proxy"): one request's
// admission, priced at its endpoint's token price, its x-ratelimit-* headers, a streamed answer's
// take-more, and one settlement, whatever way the answer ends.

export interface KeyAdmissionOptions {
  readonly allowances: Allowances;
  /** The endpoint's token price now (the key directory's last poll). */
  readonly priceOf: (endpoint: string) => TokenPrice | undefined;
  /** A completion's hold without max_tokens (GPU_KEY_HOLD_TOKENS). */
  readonly holdTokens: number;
  readonly usage?: Pick<KeyUsage, "refused">;
}

export interface KeyAdmission {
  /** The allowance of one request made with `key` to `endpoint`; undefined for a key without limits. */
  forRequest(key: KeyGrant, endpoint: string): CallerAllowance | undefined;
}

export function createKeyAdmission(options: KeyAdmissionOptions): KeyAdmission {
  return {
    forRequest: (key, endpoint) => (key.allowance === undefined ? undefined : new KeyRequest(options, key.name, key.allowance, endpoint)),
  };
}

const NEVER = new AbortController().signal;

class KeyRequest implements CallerAllowance {
  private ticket: Ticket | undefined;
  private admitting: Promise<AllowanceRefusal | undefined> | undefined;
  /** Settled (or ended before its admission answered): a late ticket is settled at once. */
  private ended = false;
  private readonly price: TokenPrice | undefined;

  constructor(
    private readonly options: KeyAdmissionOptions,
    private readonly caller: string,
    private readonly key: KeyRef,
    private readonly endpoint: string,
  ) {
    this.price = options.priceOf(endpoint);
  }

  get signal(): AbortSignal {
    return this.ticket?.signal ?? NEVER;
  }

  admit(ask: RequestAsk): Promise<AllowanceRefusal | undefined> {
    this.admitting ??= this.firstAdmit(ask);
    return this.admitting;
  }

  private async firstAdmit(ask: RequestAsk): Promise<AllowanceRefusal | undefined> {
    const { allowances, holdTokens, usage } = this.options;
    const held = ask.completion
      ? estimate({ promptChars: ask.bodyBytes, ...(ask.maxTokens !== undefined && { maxTokens: ask.maxTokens }) }, holdTokens, this.price)
      : { promptTokens: 0, completionTokens: 0, tokens: 0, micros: 0 };
    const admitted = await allowances.admit(this.key, held);
    if (!admitted.admitted) {
      usage?.refused(this.caller, this.endpoint, admitted.refusal.code);
      return this.refusal(admitted.refusal);
    }
    this.ticket = admitted.ticket;
    if (this.ended) allowances.settle(admitted.ticket, 0, 0);
    return undefined;
  }

  headers(): Record<string, string> {
    const { requests, tokens } = this.options.allowances.figures(this.key);
    const headers: Record<string, string> = {};
    if (requests !== undefined) {
      headers["x-ratelimit-limit-requests"] = String(requests.limit);
      headers["x-ratelimit-remaining-requests"] = String(requests.remaining);
      headers["x-ratelimit-reset-requests"] = openAiDuration(requests.resetMs);
    }
    if (tokens !== undefined) {
      headers["x-ratelimit-limit-tokens"] = String(tokens.limit);
      headers["x-ratelimit-remaining-tokens"] = String(tokens.remaining);
      headers["x-ratelimit-reset-tokens"] = openAiDuration(tokens.resetMs);
    }
    return headers;
  }

  used(usage: AnswerUsage): AllowanceRefusal | undefined | Promise<AllowanceRefusal | undefined> {
    const ticket = this.ticket;
    if (ticket === undefined || this.ended) return undefined;
    const tokens = usage.promptTokens + usage.completionTokens - ticket.hold.tokens;
    if (tokens <= 0) return undefined;
    const micros = this.cost(usage) - ticket.hold.micros;
    const take = this.options.allowances.takeMore(ticket, tokens, Math.max(0, micros));
    const told = (t: Take) => (t.taken ? undefined : this.endedBy(t.code));
    return take instanceof Promise ? take.then(told) : told(take);
  }

  settle(usage: AnswerUsage): void {
    if (this.ended) return;
    this.ended = true;
    if (this.ticket === undefined) return;
    this.options.allowances.settle(this.ticket, usage.promptTokens + usage.completionTokens, this.cost(usage));
  }

  private cost(usage: AnswerUsage): number {
    return costMicros(this.price, usage.promptTokens, usage.completionTokens);
  }

  private endedBy(code: Refusal["code"]): AllowanceRefusal {
    const budget = code === "budget_exceeded";
    return this.refusal({ code, type: budget ? "insufficient_quota" : "rate_limit_exceeded", retryAfterS: undefined });
  }

  private refusal(refusal: Refusal): AllowanceRefusal {
    const headers = this.headers();
    if (refusal.retryAfterS !== undefined) headers["retry-after"] = String(refusal.retryAfterS);
    if (refusal.type === "insufficient_quota") headers["x-should-retry"] = "false";
    return { detail: `key '${this.caller}' ${DETAILS[refusal.code]}`, type: refusal.type, code: refusal.code, headers };
  }
}

const DETAILS: Record<Refusal["code"], string> = {
  parallel_limit: "has as many requests in flight as its max_parallel_requests",
  rpm_limit: "made as many requests in the last 60 s as its rpm_limit",
  tpm_limit: "used as many tokens in the last 60 s as its tpm_limit allows",
  budget_exceeded: "has spent its max_budget for this budget period",
};
