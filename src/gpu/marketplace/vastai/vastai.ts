import { setTimeout as sleep } from "node:timers/promises";
import { ConflictError, InvalidInputError, NotFoundError, OperationFailedError } from "../../../errors.js";
import { createSettlingLost, DEFINITE_CREATE_REFUSALS, isDefiniteCreateAnswer, unknownCreateAnswer, type LostCreatePolicy } from "../lost-create.js";
import { bidCostPerHour, type CreateMarketInstanceRequest, type Marketplace, type MarketInstance, type MarketOffer, type OfferFilter } from "../port.js";
import { filterOffers } from "../offer-filter.js";
import { createRateWaitCounter } from "../http/rate-waits.js";
import { createVastHttp, unexpectedAnswer, vastErrorCode, vastErrorMessage, type VastAnswer, type VastHttpOptions } from "./vastai-http.js";
import { parseInstancePage, parseOffers, parseShownInstance, toCreateBody, toSearchBody } from "./vastai-wire.js";

// The marketplace port over vast.ai's REST API (docs/marketplace-vastai.md). Transport (limiter,
// 429 backoff, timeouts) lives in vastai-http.ts, the JSON in vastai-wire.ts; this file says what
// each answer means.

export interface VastMarketplaceOptions extends VastHttpOptions {
  /** A create's timeout, ms: renting can take vast.ai far longer than a read (vast-cli waits 120 s). */
  createTimeoutMs: number;
  /**
   * After a create with no answer (timeout, 5xx, dropped connection): how long its machine is
   * looked for by label, allowing for vast.ai's lag in listing a new instance, ms.
   */
  createLookupMs?: number;
  /** Hosts below this reliability2 (0..1) are never offered. */
  minReliability: number;
}

/** Largest catalogue listOffers returns: vast.ai lists tens of thousands of asks. */
export const CATALOGUE_LIMIT = 1000;
/** vast.ai's page size of the instance list (its maximum). */
const PAGE_SIZE = 25;
/** Asks remembered from searches: a create rents what a search of this process just showed. */
const SEEN_ASKS = 10_000;
/** vast.ai shows a new instance seconds after renting it: how often a create asks before answering `creating`. */
const SHOW_ATTEMPTS = 3;
const SHOW_WAIT_MS = 2_000;
/** Default of createLookupMs, and the longest wait between two looks. */
const CREATE_LOOKUP_MS = 30_000;
const LOOKUP_WAIT_MS = 5_000;
/** The create refusals vast.ai documents (create_instance.yaml), 409 among them: each says nothing was rented. */
const VAST_CREATE_REFUSALS: ReadonlySet<number> = new Set([...DEFINITE_CREATE_REFUSALS, 409]);

/**
 * vast.ai's dph_total is the GPUs plus the disk asked for at creation (search prices it with
 * allocated_storage); it bills internet traffic per GB beside it (inet_up_cost, inet_down_cost).
 */
const COST_INCLUDES =
  "vast.ai's dph_total over the uptime: the GPUs and the allocated disk; internet traffic is billed by vast.ai per GB beside it and is not included";

const ASK = "PUT /api/v0/asks/{id}/";
const SEARCH = "POST /api/v0/bundles/";
const SHOW = "GET /api/v0/instances/{id}/";
const LIST = "GET /api/v1/instances/";
const DESTROY = "DELETE /api/v0/instances/{id}/";
const CHANGE_BID = "PUT /api/v0/instances/bid_price/{id}/";

export function createVastMarketplace(options: VastMarketplaceOptions): Marketplace {
  const rateWaits = createRateWaitCounter();
  const http = createVastHttp({ ...options, rateWaits });
  const instancePath = (id: string) => `/api/v0/instances/${encodeURIComponent(id)}/`;
  // The terms of the asks searches showed, newest last: what a create rented before vast.ai shows
  // the instance, and whether a 404 on a create means "taken" (seen) or "no such ask" (never seen).
  const seen = new Map<string, MarketOffer>();
  // vast.ai lists a new instance seconds late, so a resend could rent a second machine unseen: none.
  const lookupMs = options.createLookupMs ?? CREATE_LOOKUP_MS;
  const lostCreates: LostCreatePolicy = { lookupMs, lookEveryMs: Math.min(LOOKUP_WAIT_MS, lookupMs / 3), resends: 0, backoffMs: 0 };

  function remember(offers: readonly MarketOffer[]): void {
    for (const offer of offers) {
      seen.delete(offer.id);
      seen.set(offer.id, offer);
    }
    for (const oldest of seen.keys()) {
      if (seen.size <= SEEN_ASKS) break;
      seen.delete(oldest);
    }
  }

  async function searchOffers(asked: OfferFilter, signal?: AbortSignal): Promise<MarketOffer[]> {
    // vast.ai ids are integers: any other id names no offer.
    if (asked.offerId !== undefined && !isVastId(asked.offerId)) return [];
    // A search leaves unreliable hosts out; a named ask is found, and refused with the reason.
    const filter = asked.offerId === undefined ? { ...asked, minReliability: options.minReliability } : asked;
    const answer = await http({ endpoint: SEARCH, method: "POST", path: "/api/v0/bundles/", body: toSearchBody(filter), repeatable: true, signal });
    if (answer.status !== 200) throw searchError(answer);
    const offers = parseOffers(answer.body, asked.interruptible === true);
    remember(offers);
    if (asked.offerId !== undefined) offers.forEach(checkReliable);
    return filterOffers(offers, filter);
  }

  function checkReliable(offer: MarketOffer): void {
    if (offer.reliability === undefined || offer.reliability >= options.minReliability) return;
    throw new InvalidInputError(
      `Offer '${offer.id}' is on a host with reliability ${offer.reliability}, below the floor of ${options.minReliability} (VAST_MIN_RELIABILITY)`,
      { extra: { field: "offer_id", limit: "min_reliability" } },
    );
  }

  async function getInstance(id: string, signal?: AbortSignal): Promise<MarketInstance | undefined> {
    if (!isVastId(id)) return undefined;
    const answer = await http({ endpoint: SHOW, method: "GET", path: instancePath(id), query: { owner: "me" }, repeatable: true, signal });
    if (isGone(answer)) return undefined;
    if (answer.status !== 200) throw unexpectedAnswer(answer, "show the instance");
    return parseShownInstance(answer.body);
  }

  async function destroyInstance(id: string, signal?: AbortSignal): Promise<void> {
    if (!isVastId(id)) return;
    const answer = await http({ endpoint: DESTROY, method: "DELETE", path: instancePath(id), body: {}, repeatable: true, signal });
    if (isGone(answer)) return;
    if (answer.status !== 200 || !isSuccess(answer.body)) throw unexpectedAnswer(answer, `destroy instance ${id}`);
  }

  /**
   * What a create rented: the instance as vast.ai shows it, or, while vast.ai does not show it yet
   * (it lags by seconds), `creating` on the terms of the ask. A machine is never destroyed because
   * vast.ai has not shown it: the sync loop follows it from here.
   */
  async function rented(id: string, request: CreateMarketInstanceRequest, signal?: AbortSignal): Promise<MarketInstance> {
    const offer = seen.get(request.offerId);
    const terms = offer ?? request.terms;
    const bid = request.bidPerHour;
    for (let attempt = 1; ; attempt++) {
      const shown = await getInstance(id, signal);
      if (shown) return { ...shown, offerId: request.offerId, ...(bid !== undefined && { bidPerHour: bid }) };
      // With the ask's terms known there is nothing to wait for; without them, a few looks.
      if (terms || attempt >= SHOW_ATTEMPTS) break;
      await sleep(SHOW_WAIT_MS, undefined, signal ? { signal } : undefined);
    }
    return {
      id,
      offerId: request.offerId,
      label: request.label,
      status: "creating",
      publicIp: "",
      sshPort: 0,
      portMappings: {},
      gpuName: terms?.gpuName ?? "",
      numGpus: terms?.numGpus ?? 0,
      gpuRam: terms?.gpuRam ?? 0,
      // A bid is billed the bid plus the storage of the ask, not the price the search showed.
      dphTotal: bid !== undefined ? bidCostPerHour(offer ?? {}, bid) : (terms?.dphTotal ?? 0),
      interruptible: bid !== undefined,
      ...(bid !== undefined && { bidPerHour: bid }),
    };
  }

  /** Every instance of the account, page by page. */
  async function listAll(signal?: AbortSignal): Promise<MarketInstance[]> {
    const found: MarketInstance[] = [];
    let after: string | undefined;
    do {
      const answer = await http({
        endpoint: LIST,
        method: "GET",
        path: "/api/v1/instances/",
        query: { select_filters: {}, order_by: [{ col: "id", dir: "asc" }], limit: PAGE_SIZE, ...(after && { after_token: after }) },
        repeatable: true,
        signal,
      });
      if (answer.status !== 200) throw unexpectedAnswer(answer, "list the instances");
      const page = parseInstancePage(answer.body);
      found.push(...page.instances);
      after = page.nextToken;
    } while (after);
    return found;
  }

  /** One create; OutcomeUnknownError when vast.ai's answer does not say whether it rented (lost-create.ts). */
  async function createOnce(request: CreateMarketInstanceRequest, signal?: AbortSignal): Promise<MarketInstance> {
    const offerId = request.offerId;
    const answer = await http({
      endpoint: ASK,
      method: "PUT",
      path: `/api/v0/asks/${offerId}/`,
      body: toCreateBody(request),
      repeatable: false,
      timeoutMs: options.createTimeoutMs,
      signal,
    });
    const contract = newContractOf(answer.body);
    if (answer.status === 200 && isSuccess(answer.body) && contract !== undefined) return rented(contract, request, signal);
    // A failed create can still have rented a machine (vast.ai then names it; a bid it did not
    // accept is left stopped, billing its storage): give it back.
    if (contract !== undefined) await destroyInstance(contract, signal);
    if (request.bidPerHour !== undefined && contract !== undefined) throw bidRefused(answer, offerId, request.bidPerHour, contract);
    if (!isDefiniteCreateAnswer(answer.status, VAST_CREATE_REFUSALS)) throw unknownCreateAnswer("vast.ai", answer.status, vastErrorMessage(answer.body));
    throw createError(answer, offerId, seen.has(offerId));
  }

  return {
    costIncludes: COST_INCLUDES,
    interruptible: true,
    rateLimitWaits: () => rateWaits.read(),
    listOffers: (signal) => searchOffers({ limit: CATALOGUE_LIMIT }, signal),
    searchOffers,
    getInstance,
    destroyInstance,

    async createInstance(request, signal) {
      if (!isVastId(request.offerId)) throw offerNotFound(request.offerId);
      const machine = await createSettlingLost(lostCreates, {
        market: "vast.ai",
        label: request.label,
        send: (s) => createOnce(request, s),
        find: async (label, s) => (await listAll(s)).find((m) => m.label === label),
        logger: options.logger,
        signal,
      });
      return { ...machine, offerId: request.offerId };
    },

    async changeBid(id, bidPerHour, signal) {
      if (!isVastId(id)) throw new NotFoundError(`Instance '${id}' not found on vast.ai`);
      const answer = await http({
        endpoint: CHANGE_BID,
        method: "PUT",
        path: `/api/v0/instances/bid_price/${encodeURIComponent(id)}/`,
        body: { client_id: "me", price: bidPerHour },
        repeatable: true,
        signal,
      });
      if (vastErrorCode(answer.body) === "no_such_instance") throw new NotFoundError(`Instance '${id}' not found on vast.ai`);
      if (answer.status === 400) throw new InvalidInputError(`vast.ai refused the bid of $${bidPerHour}/h: ${vastErrorMessage(answer.body) ?? "invalid"}`);
      if (answer.status !== 200 || !isSuccess(answer.body)) throw unexpectedAnswer(answer, `change the bid of instance ${id}`);
    },

    async listInstances(labelPrefix, signal) {
      return (await listAll(signal)).filter((i) => i.label.startsWith(labelPrefix));
    },

    async close() {
      // Nothing held: fetch's connection pool closes idle sockets by itself.
    },
  };
}

function isVastId(id: string): boolean {
  return /^[1-9]\d{0,15}$/.test(id);
}

function isSuccess(body: unknown): boolean {
  return typeof body === "object" && body !== null && (body as Record<string, unknown>).success !== false;
}

function newContractOf(body: unknown): string | undefined {
  const contract = typeof body === "object" && body !== null ? (body as Record<string, unknown>).new_contract : undefined;
  return Number.isInteger(contract) ? String(contract) : undefined;
}

/**
 * vast.ai's "no such instance" on an instance's own path: `instances: null` on a show, the error
 * `no_such_instance`, or a 404 `not_found`. Any other 404 (a wrong VAST_API_URL, a proxy's page,
 * another error code) is not read as gone: that would stop billing nowhere but here.
 */
function isGone(answer: VastAnswer): boolean {
  const code = vastErrorCode(answer.body);
  if (code === "no_such_instance" || (answer.status === 404 && code === "not_found")) return true;
  const body = answer.body;
  return answer.status === 200 && typeof body === "object" && body !== null && (body as Record<string, unknown>).instances === null;
}

/**
 * A bid vast.ai did not accept (below the ask's minimum bid by the time it arrived) that still
 * named the stopped instance it left, now destroyed: the offer as bid on is gone, so an
 * auto-pick moves on.
 */
function bidRefused(answer: VastAnswer, offerId: string, bid: number, contract: string): ConflictError {
  const why = vastErrorMessage(answer.body);
  return new ConflictError(
    `Offer '${offerId}' did not take the bid of $${bid}/h${why ? `: ${why}` : ""}; the stopped instance ${contract} vast.ai left for it was destroyed`,
    { extra: { field: "offer_id" } },
  );
}

function offerNotFound(offerId: string): NotFoundError {
  return new NotFoundError(`Offer '${offerId}' not found`, { extra: { field: "offer_id" } });
}

/** vast.ai answers an invalid key with 401, and on a search with 404: a configuration error either way. */
function searchError(answer: VastAnswer): Error {
  if (answer.status !== 404) return unexpectedAnswer(answer, "search its offers");
  return new OperationFailedError("vast.ai answered a search with 404, as it does for an invalid API key; check VAST_API_KEY (and VAST_API_URL)", {
    extra: { code: "MARKETPLACE_AUTH_REFUSED" },
  });
}

/**
 * The documented errors of PUT /api/v0/asks/{id}/. vast.ai answers 404 "not found or not
 * available" both for an ask that never existed and for one rented meanwhile: an ask a search of
 * this process showed is taken (an auto-pick moves on), any other is not found.
 */
function createError(answer: VastAnswer, offerId: string, seenInSearch: boolean): Error {
  const why = vastErrorMessage(answer.body);
  const taken = (reason: string) => new ConflictError(`Offer '${offerId}' is not rentable any more: ${reason}`, { extra: { field: "offer_id" } });
  switch (answer.status) {
    case 404:
      return seenInSearch ? taken(`vast.ai answered that it is not available (rented meanwhile)${why ? `: ${why}` : ""}`) : offerNotFound(offerId);
    case 409:
    case 410:
      return taken(why ?? "vast.ai answered that it is no longer available");
    case 403:
      // The key is fine (a search worked); this ask cannot be rented by this account.
      return taken(`vast.ai does not let this account rent it${why ? `: ${why}` : ""}`);
    case 400:
      // The quote moved since the search (create_instance.yaml): the offer as found is gone.
      if (vastErrorCode(answer.body) === "invalid_price") return taken(`vast.ai's price for it changed since the search${why ? `: ${why}` : ""}`);
      return new InvalidInputError(`vast.ai refused to rent offer '${offerId}'${why ? `: ${why}` : ""}`, { extra: { field: "offer_id" } });
    default:
      return unexpectedAnswer(answer, `rent offer '${offerId}'`);
  }
}
