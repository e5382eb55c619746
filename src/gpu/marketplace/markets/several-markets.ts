import type { Logger } from "pino";
import { DomainError, MarketBlockedError, messageOf, UnavailableError, type DomainErrorOptions } from "../../../errors.js";
import type {
  CreateMarketInstanceRequest,
  MarketDirectory,
  MarketInstance,
  MarketListing,
  MarketOffer,
  Marketplace,
  OfferFilter,
} from "../port.js";
import { createHealthTracker, refusesAccount, type HealthTracker } from "./market-health.js";
import { createMarketIds, instanceRef } from "./market-ids.js";
import { createMarketRefusals } from "./market-refusals.js";
import { mergedOffers } from "./merged-offers.js";

// The configured markets behind the one port (SPEC.md section 2, "Several marketplaces"). A
// search asks every market at once, each under its own timeout, and answers with what the
// markets that answered offer; each offer and instance names its market, offer ids carry it with
// several markets and instance ids always (market-ids.ts), so that every instance call goes to
// the instance's own market.
// A blocked market (MarketBlockedError) is left out of auto-picks but for one create a minute;
// when it is the only market a pick may rent on, the pick answers its refusal (market-refusals.ts).

export interface NamedMarket {
  name: string;
  marketplace: Marketplace;
}

export interface SeveralMarketsOptions {
  /** In order of preference; names distinct. */
  markets: readonly NamedMarket[];
  /** With several markets, the most a search or a listing waits for each, ms. */
  timeoutMs: number;
  /** Every market name there is, configured or not: an instance id of one not configured is never sent elsewhere. */
  knownMarkets?: readonly string[];
  logger: Logger;
  now?: () => number;
}

/** The composite, with the health its calls saw (for the per-market metrics). */
export type SeveralMarkets = Marketplace & { readonly markets: MarketDirectory; readonly tracker: HealthTracker };

export function createSeveralMarkets(options: SeveralMarketsOptions): SeveralMarkets {
  const names = options.markets.map((m) => m.name);
  const adapters = new Map(options.markets.map((m) => [m.name, m.marketplace]));
  const adapter = (name: string) => adapters.get(name)!;
  const ids = createMarketIds(names, options.knownMarkets);
  const tracker = createHealthTracker(names, options.now);
  const several = names.length > 1;
  const reported = (name: string) => adapter(name).health?.();
  const refusals = createMarketRefusals(several);
  const refusalOf = (name: string) => refusals.answerFor(name, tracker.health(name, reported(name)));

  /** One market's call, counted in its health; with several markets, cut at the timeout. */
  async function call<T>(name: string, what: "read" | "create", run: (signal?: AbortSignal) => Promise<T>, signal?: AbortSignal, timed = false): Promise<T> {
    try {
      const result = await (timed && several ? withTimeout(name, run, options.timeoutMs, signal) : run(signal));
      tracker.succeeded(name, what);
      return result;
    } catch (err) {
      tracker.failed(name, err);
      refusals.noted(name, err);
      throw err;
    }
  }

  async function eachMarket<T>(marketNames: readonly string[], run: (name: string, signal?: AbortSignal) => Promise<T[]>, signal?: AbortSignal) {
    return Promise.all(
      marketNames.map(async (market): Promise<MarketListing<T>> => {
        try {
          return { market, ok: true, items: await call(market, "read", (s) => run(market, s), signal, true) };
        } catch (err) {
          options.logger.warn({ err, market }, "a market did not answer; the others answer for themselves");
          return { market, ok: false, items: [], error: messageOf(err), cause: err };
        }
      }),
    );
  }

  /** The items of the markets that answered; when none did, the first market's failure as it was. */
  function answered<T>(listings: MarketListing<T>[]): T[] {
    if (listings.length > 0 && listings.every((l) => !l.ok)) throw listings[0]!.cause;
    return listings.flatMap((l) => l.items);
  }

  const offerOf = (market: string) => (offer: MarketOffer): MarketOffer => ({ ...offer, id: ids.qualify(market, offer.id), market });
  const instanceOf = (market: string) => (instance: MarketInstance): MarketInstance => ({
    ...instance,
    id: instanceRef(market, instance.id),
    offerId: ids.qualify(market, instance.offerId),
    market,
  });

  const directory: MarketDirectory = {
    names,
    listOffersEach: (signal) => eachMarket(names, async (name, s) => (await adapter(name).listOffers(s)).map(offerOf(name)), signal),
    listInstancesEach: (labelPrefix, signal) =>
      eachMarket(names, async (name, s) => (await adapter(name).listInstances(labelPrefix, s)).map(instanceOf(name)), signal),
    states: () =>
      names.map((market) => ({
        market,
        health: tracker.health(market, reported(market)),
        interruptible: adapter(market).interruptible === true,
        ...tracker.counts(market),
        rateLimitWaits: adapter(market).rateLimitWaits?.(),
      })),
  };

  const costs = names.filter((n) => adapter(n).costIncludes !== undefined);
  const anyBids = names.some((n) => adapter(n).interruptible === true);

  return {
    markets: directory,
    tracker,
    interruptible: anyBids,
    costIncludes: several ? (costs.length > 0 ? costs.map((n) => `${n}: ${adapter(n).costIncludes}`).join("; ") : undefined) : adapter(names[0]!).costIncludes,

    async listOffers(signal) {
      return answered(await eachMarket(names, async (name, s) => (await adapter(name).listOffers(s)).map(offerOf(name)), signal));
    },

    async searchOffers(filter: OfferFilter, signal) {
      if (filter.offerId !== undefined) {
        const { market, id } = ids.ofOffer(filter.offerId);
        const found = await call(market, "read", (s) => adapter(market).searchOffers({ ...filter, offerId: id }, s), signal);
        return found.map(offerOf(market));
      }
      // An auto-pick's search: every market that may rent now and rents what is asked.
      const { markets: only, ...asMarket } = filter;
      const allowed = names.filter((n) => !only?.length || only.includes(n));
      const unblocked = allowed.filter((n) => tracker.mayOffer(n));
      // Every market the pick may rent on refuses the account: that is the answer, not "no offer".
      // (One that is open elsewhere, though it rents no bids, leaves a bid search empty instead.)
      if (unblocked.length === 0 && allowed.length > 0) throw refusalOf(allowed[0]!);
      const asked = unblocked.filter((n) => !filter.interruptible || adapter(n).interruptible === true);
      const offers = answered(await eachMarket(asked, async (name, s) => (await adapter(name).searchOffers(asMarket, s)).map(offerOf(name)), signal));
      if (!several) return offers;
      return mergedOffers(offers, filter.order, filter.limit);
    },

    async createInstance(request: CreateMarketInstanceRequest, signal) {
      const { market, id } = ids.ofOffer(request.offerId);
      if (!tracker.mayRent(market)) throw refusalOf(market);
      try {
        const created = await call(market, "create", (s) => adapter(market).createInstance({ ...request, offerId: id }, s), signal);
        return instanceOf(market)(created);
      } catch (err) {
        // With several markets a refused account is that market's trouble, not the service's: the creation goes on elsewhere.
        if (several && refusesAccount(err) && !(err instanceof MarketBlockedError)) {
          throw new MarketBlockedError(`The market '${market}' refuses this account: ${messageOf(err)}`, { cause: err });
        }
        throw several ? saidBy(market, err) : err;
      }
    },

    async getInstance(instanceId, signal, getOptions) {
      const { market, id } = ids.ofInstance(instanceId);
      const found = await call(market, "read", (s) => adapter(market).getInstance(id, s, getOptions), signal);
      return found && instanceOf(market)(found);
    },

    async listInstances(labelPrefix, signal) {
      return answered(await eachMarket(names, async (name, s) => (await adapter(name).listInstances(labelPrefix, s)).map(instanceOf(name)), signal));
    },

    ...(names.some((n) => adapter(n).changeBid) && {
      async changeBid(instanceId: string, bidPerHour: number, signal?: AbortSignal) {
        const { market, id } = ids.ofInstance(instanceId);
        const change = adapter(market).changeBid;
        if (!change) throw new UnavailableError(`The market '${market}' has no bids to change`);
        await call(market, "read", (s) => change.call(adapter(market), id, bidPerHour, s), signal);
      },
    }),

    async destroyInstance(instanceId, signal) {
      const { market, id } = ids.ofInstance(instanceId);
      await call(market, "read", (s) => adapter(market).destroyInstance(id, s), signal);
    },

    async close() {
      await Promise.all(names.map((n) => adapter(n).close()));
    },
  };
}

/** A market's refusal in its own words, prefixed with its name (its ids inside are its own, unprefixed). */
function saidBy(market: string, err: unknown): unknown {
  if (!(err instanceof DomainError)) return err;
  const Same = err.constructor as new (message: string, options: DomainErrorOptions) => DomainError;
  return new Same(`${market}: ${err.message}`, { cause: err, extra: err.extra });
}

/** Runs a market's call under its own timeout: the call is aborted, and its answer no longer awaited, past it. */
async function withTimeout<T>(market: string, run: (signal: AbortSignal) => Promise<T>, timeoutMs: number, outer?: AbortSignal): Promise<T> {
  const controller = new AbortController();
  const onAbort = () => controller.abort(outer?.reason);
  outer?.addEventListener("abort", onAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new UnavailableError(`The market '${market}' did not answer within ${timeoutMs} ms`);
      controller.abort(err);
      reject(err);
    }, timeoutMs);
  });
  try {
    return await Promise.race([run(controller.signal), expired]);
  } finally {
    clearTimeout(timer);
    outer?.removeEventListener("abort", onAbort);
  }
}
