import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { messageOf, OutcomeUnknownError } from "../../errors.js";
import type { MarketInstance } from "./port.js";

// One policy for a create whose outcome a market left unknown, shared by the adapters behind the
// port (SPEC.md section 2, "Several marketplaces"). A create's answer is definite only when it is
// a 2xx or a refusal whose meaning is known; anything else (every 5xx, Cloudflare's 520-524
// among them, a 4xx nobody documented, a timeout, a dropped connection) may have rented a
// machine, which carries the create's label. So the label is looked up first, for as long as the
// market may take to list a new machine: found, the machine is what the create rented. Not
// found, the create is sent again on the same offer where the market allows it (`resends`, with
// backoff); once every attempt is spent, the outcome stays unknown, the record stays creating,
// and the reconciler adopts the machine when it shows up or fails the record after the creation
// grace. A refusal after a lost attempt says nothing of the lost one: the outcome stays unknown.
// Twins (a resend that rented while the lost attempt's machine was not listed yet) are settled
// against the database: the reconciler keeps the machine the record names and destroys the rest.

/** The 4xx of a create whose meaning is known: no capacity or pool refused, blocked, taken, bad body. */
export const DEFINITE_CREATE_REFUSALS: ReadonlySet<number> = new Set([400, 401, 402, 403, 404, 410, 422]);

export interface LostCreatePolicy {
  /** How long a lost create's label is looked for, ms (the market's lag in listing a new machine); 0: one look. */
  lookupMs: number;
  /** The longest wait between two looks, ms. */
  lookEveryMs: number;
  /** Creates sent again when the label is not found; 0 where the market lists too late for a resend to be safe. */
  resends: number;
  /** Wait before the first resend, ms; doubles with each. */
  backoffMs: number;
}

export interface CreateAttempts {
  /** The market in messages: "RunPod", "vast.ai". */
  market: string;
  label: string;
  /** One create; OutcomeUnknownError when its outcome is unknown, any other error a definite refusal. */
  send(signal?: AbortSignal): Promise<MarketInstance>;
  /** The machine of the market carrying exactly this label, if it lists one. */
  find(label: string, signal?: AbortSignal): Promise<MarketInstance | undefined>;
  logger?: Logger;
  signal?: AbortSignal;
}

/** Whether a create's answer settles it: a 2xx, or a refusal of `refusals`. */
export function isDefiniteCreateAnswer(status: number, refusals: ReadonlySet<number> = DEFINITE_CREATE_REFUSALS): boolean {
  return (status >= 200 && status < 300) || refusals.has(status);
}

/** A create answered with a status that does not settle it. */
export function unknownCreateAnswer(market: string, status: number, detail?: string): OutcomeUnknownError {
  return new OutcomeUnknownError(`${market} answered the create with HTTP ${status}${detail ? ` (${detail})` : ""}, which does not say whether it rented`);
}

/** Sends the create, and settles a lost outcome by the label as the policy says. */
export async function createSettlingLost(policy: LostCreatePolicy, attempts: CreateAttempts): Promise<MarketInstance> {
  const { market, label, logger, signal } = attempts;
  let lost: OutcomeUnknownError | undefined;
  for (let attempt = 0; ; attempt++) {
    try {
      return await attempts.send(signal);
    } catch (err) {
      if (!(err instanceof OutcomeUnknownError)) {
        if (!lost) throw err;
        throw new OutcomeUnknownError(`${lost.message}; the create sent again was refused (${messageOf(err)}), which says nothing of the first`, { cause: err });
      }
      lost = err;
    }
    const found = await lookUp(policy, attempts, lost);
    if (found) {
      logger?.warn({ label, instance: found.id, attempt: attempt + 1 }, `${market} did not answer a create, but rented the machine: adopted`);
      return found;
    }
    if (attempt >= policy.resends) {
      throw new OutcomeUnknownError(
        `${lost.message}; nothing labelled ${label} is listed after ${attempt + 1} attempt${attempt > 0 ? "s" : ""}: ` +
          `the instance stays creating until ${market} lists it (it is then adopted) or the creation grace ends`,
        { cause: lost },
      );
    }
    logger?.warn({ label, attempt: attempt + 1 }, `${market} did not answer a create and lists nothing of its label: sent again`);
    await sleep(policy.backoffMs * 2 ** attempt, undefined, signal ? { signal } : undefined);
  }
}

/** Looks for the label until the policy's lookup time has passed; a listing that fails leaves the outcome unknown. */
async function lookUp(policy: LostCreatePolicy, attempts: CreateAttempts, cause: OutcomeUnknownError): Promise<MarketInstance | undefined> {
  const until = Date.now() + policy.lookupMs;
  for (;;) {
    let found: MarketInstance | undefined;
    try {
      found = await attempts.find(attempts.label, attempts.signal);
    } catch (err) {
      if (attempts.signal?.aborted) throw err;
      throw new OutcomeUnknownError(`${cause.message}; ${attempts.market}'s machines could not be listed to find out whether it rented: ${messageOf(err)}`, {
        cause,
      });
    }
    if (found) return found;
    const left = until - Date.now();
    if (left <= 0) return undefined;
    await sleep(Math.min(policy.lookEveryMs, left), undefined, attempts.signal ? { signal: attempts.signal } : undefined);
  }
}
