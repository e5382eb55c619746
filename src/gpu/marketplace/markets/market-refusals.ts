import { MarketBlockedError, messageOf } from "../../../errors.js";
import type { MarketHealth } from "../port.js";
import { refusesAccount } from "./market-health.js";

// What a caller hears from a market that refuses the account, when nothing else may answer (SPEC.md
// section 2, "With one market configured and it blocked"): that market's refusal, never "no offer".
// With one market it is the refusal as the market gave it (a refused key: the configuration error
// naming the key's variable, 500; no balance: 503 naming the market and why); with several, the
// market's blocked state in its own words (503), as a create there is answered.

export interface MarketRefusals {
  /** Keeps the market's latest refusal of the account; any other error is not one. */
  noted(market: string, err: unknown): void;
  /** The error that answers for a blocked market. */
  answerFor(market: string, health: MarketHealth): Error;
}

export function createMarketRefusals(several: boolean): MarketRefusals {
  const latest = new Map<string, Error>();
  return {
    noted(market, err) {
      if (refusesAccount(err) && err instanceof Error) latest.set(market, err);
    },
    answerFor(market, health) {
      const refusal = latest.get(market);
      if (refusal && !several) return refusal;
      const why = refusal ? messageOf(refusal) : (health.error ?? "blocked");
      return new MarketBlockedError(`The market '${market}' refuses this account (${why}); it is tried again once a minute`, { cause: refusal });
    },
  };
}
