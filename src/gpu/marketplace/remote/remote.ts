import { ConflictError, NotFoundError, OperationFailedError } from "../../../errors.js";
import { createMarketplaceHttp, type MarketplaceHttpOptions } from "./remote-http.js";
import type { Marketplace } from "../port.js";
import { filterOffers } from "../offer-filter.js";
import { errorCode, errorMessage, parseInstanceAnswer, parseInstances, parseOffers, toCreateBody } from "./remote-wire.js";

// The marketplace port over the HTTP contract of docs/marketplace-api.md. Transport concerns
// (timeouts, retries, auth failures) live in remote-http.ts; this file says what each answer means.

export type RemoteMarketplaceOptions = MarketplaceHttpOptions;

export function createRemoteMarketplace(options: RemoteMarketplaceOptions): Marketplace {
  const http = createMarketplaceHttp(options);
  const instancePath = (id: string) => `/v1/instances/${encodeURIComponent(id)}`;

  async function listOffers(signal?: AbortSignal) {
    const { body } = await http("GET", "/v1/offers", { signal });
    return parseOffers(body);
  }

  return {
    listOffers,

    async searchOffers(filter, signal) {
      // The contract has no search call: its catalogue is small enough to filter here.
      return filterOffers(await listOffers(signal), filter);
    },

    async createInstance(request, signal) {
      // The label is unique per instance GpuService creates, so it is the natural idempotency key:
      // a retried create gets back the machine its first attempt rented.
      const { status, body } = await http("POST", "/v1/instances", {
        body: toCreateBody(request),
        headers: { "idempotency-key": request.label },
        accept: [404, 409],
        signal,
      });
      if (status === 404) {
        expectCode(body, "offer_not_found");
        throw new NotFoundError(`Offer '${request.offerId}' not found`, { extra: { field: "offer_id" } });
      }
      if (status === 409 && errorCode(body) === "idempotency_key_reused") {
        throw new ConflictError(`The marketplace already used label '${request.label}' for another create`);
      }
      if (status === 409) {
        const why = errorMessage(body);
        throw new ConflictError(`Offer '${request.offerId}' is not rentable any more${why ? `: ${why}` : ""}`, {
          extra: { field: "offer_id" },
        });
      }
      return parseInstanceAnswer(body);
    },

    async getInstance(id, signal) {
      const { status, body } = await http("GET", instancePath(id), { accept: [404], signal });
      if (status === 404) return expectCode(body, "instance_not_found");
      return parseInstanceAnswer(body);
    },

    async listInstances(labelPrefix, signal) {
      const { body } = await http("GET", `/v1/instances?label_prefix=${encodeURIComponent(labelPrefix)}`, { signal });
      return parseInstances(body);
    },

    async destroyInstance(id, signal) {
      // 200 is the marketplace's confirmation; 404 instance_not_found means it is already gone,
      // which is success too.
      const { status, body } = await http("DELETE", instancePath(id), { accept: [404], signal });
      if (status === 404) expectCode(body, "instance_not_found");
    },

    async close() {
      // Nothing held: fetch's connection pool closes idle sockets by itself.
    },
  };
}

/**
 * A 404 means "gone" only when the marketplace says so. Any other 404 (a wrong MARKETPLACE_URL, a
 * proxy's page) must not be read as "already destroyed": that would stop billing nowhere but here.
 */
function expectCode(body: unknown, code: string): undefined {
  if (errorCode(body) === code) return undefined;
  throw new OperationFailedError(`The marketplace answered 404 without '${code}'; is MARKETPLACE_URL right?`);
}
