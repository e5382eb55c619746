import { ConflictError, InvalidInputError, NotFoundError, OperationFailedError } from "../../../errors.js";
import type { CreateMarketInstanceRequest, Marketplace, MarketInstance, MarketOffer, OfferFilter } from "../port.js";
import { filterOffers } from "../offer-filter.js";
import { createVastHttp, unexpectedAnswer, vastErrorCode, vastErrorMessage, type VastAnswer, type VastHttpOptions } from "./vastai-http.js";
import { parseInstancePage, parseOffers, parseShownInstance, toCreateBody, toSearchBody } from "./vastai-wire.js";

// The marketplace port over vast.ai's REST API (docs/marketplace-vastai.md). Transport (limiter,
// 429 backoff, timeouts) lives in vastai-http.ts, the JSON in vastai-wire.ts; this file says what
// each answer means.

export type VastMarketplaceOptions = VastHttpOptions;

/** Largest catalogue listOffers returns: vast.ai lists tens of thousands of asks. */
export const CATALOGUE_LIMIT = 1000;
/** vast.ai's page size of the instance list (its maximum). */
const PAGE_SIZE = 25;

const ASK = "PUT /api/v0/asks/{id}/";
const SEARCH = "POST /api/v0/bundles/";
const SHOW = "GET /api/v0/instances/{id}/";
const LIST = "GET /api/v1/instances/";
const DESTROY = "DELETE /api/v0/instances/{id}/";

export function createVastMarketplace(options: VastMarketplaceOptions): Marketplace {
  const http = createVastHttp(options);
  const instancePath = (id: string) => `/api/v0/instances/${encodeURIComponent(id)}/`;

  async function searchOffers(filter: OfferFilter, signal?: AbortSignal): Promise<MarketOffer[]> {
    // vast.ai ids are integers: any other id names no offer.
    if (filter.offerId !== undefined && !isVastId(filter.offerId)) return [];
    const answer = await http({ endpoint: SEARCH, method: "POST", path: "/api/v0/bundles/", body: toSearchBody(filter), repeatable: true, signal });
    if (answer.status !== 200) throw unexpectedAnswer(answer, "search its offers");
    return filterOffers(parseOffers(answer.body), filter);
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

  /** What a create rented: the instance as vast.ai shows it, or, before it shows it, the ask's terms. */
  async function rented(id: string, request: CreateMarketInstanceRequest, signal?: AbortSignal): Promise<MarketInstance> {
    const shown = await getInstance(id, signal);
    if (shown) return shown;
    const [offer] = await searchOffers({ offerId: request.offerId, diskGb: request.diskGb }, signal);
    if (!offer) throw new OperationFailedError(`vast.ai created instance ${id} but shows neither it nor ask ${request.offerId}`);
    const { gpuName, numGpus, gpuRam, dphTotal } = offer;
    return { id, offerId: offer.id, label: request.label, status: "creating", publicIp: "", sshPort: 0, portMappings: {}, gpuName, numGpus, gpuRam, dphTotal };
  }

  return {
    listOffers: (signal) => searchOffers({ limit: CATALOGUE_LIMIT }, signal),
    searchOffers,
    getInstance,
    destroyInstance,

    async createInstance(request, signal) {
      const offerId = request.offerId;
      if (!isVastId(offerId)) throw offerNotFound(offerId);
      const answer = await http({
        endpoint: ASK,
        method: "PUT",
        path: `/api/v0/asks/${offerId}/`,
        body: toCreateBody(request),
        repeatable: false,
        signal,
      });
      const contract = newContractOf(answer.body);
      if (answer.status === 200 && isSuccess(answer.body) && contract !== undefined) {
        const market = await rented(contract, request, signal).catch(async (err: unknown) => {
          await destroyInstance(contract, signal);
          throw err;
        });
        return { ...market, offerId: market.offerId || offerId };
      }
      // A failed create can still have rented a machine (vast.ai then names it): give it back.
      if (contract !== undefined) await destroyInstance(contract, signal);
      throw createError(answer, offerId);
    },

    async listInstances(labelPrefix, signal) {
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
        found.push(...page.instances.filter((i) => i.label.startsWith(labelPrefix)));
        after = page.nextToken;
      } while (after);
      return found;
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
 * vast.ai's "no such instance": `instances: null` on a show, a 404 with an error code, or
 * `no_such_instance`. A 404 without a JSON error (a wrong VAST_API_URL, a proxy's page) is not
 * read as gone: that would stop billing nowhere but here.
 */
function isGone(answer: VastAnswer): boolean {
  const code = vastErrorCode(answer.body);
  if (code === "no_such_instance") return true;
  if (answer.status === 404) return code !== undefined;
  const body = answer.body;
  return answer.status === 200 && typeof body === "object" && body !== null && (body as Record<string, unknown>).instances === null;
}

function offerNotFound(offerId: string): NotFoundError {
  return new NotFoundError(`Offer '${offerId}' not found`, { extra: { field: "offer_id" } });
}

/** The documented errors of PUT /api/v0/asks/{id}/. */
function createError(answer: VastAnswer, offerId: string): Error {
  const why = vastErrorMessage(answer.body);
  switch (answer.status) {
    case 404:
      return offerNotFound(offerId);
    case 409:
    case 410:
      return new ConflictError(`Offer '${offerId}' is not rentable any more${why ? `: ${why}` : ""}`, { extra: { field: "offer_id" } });
    case 400:
      return new InvalidInputError(`vast.ai refused to rent offer '${offerId}'${why ? `: ${why}` : ""}`, { extra: { field: "offer_id" } });
    default:
      return unexpectedAnswer(answer, `rent offer '${offerId}'`);
  }
}
