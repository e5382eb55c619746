import type { Logger } from "pino";
import { ConflictError, InvalidInputError, NotFoundError, OperationFailedError, OutcomeUnknownError } from "../../../errors.js";
import { createSettlingLost, isDefiniteCreateAnswer, unknownCreateAnswer, type LostCreatePolicy } from "../lost-create.js";
import { filterOffers } from "../offer-filter.js";
import type { CreateMarketInstanceRequest, Marketplace, MarketInstance, MarketOffer, OfferFilter } from "../port.js";
import { createRunpodCatalogue } from "./runpod-catalogue.js";
import { createRunpodHttp, unexpectedAnswer, unreadable } from "./runpod-http.js";
import { withDisk } from "./runpod-disk.js";
import {
  CLOUDS,
  DEFAULT_DISK_GB,
  offersOf,
  parseOfferId,
  parsePod,
  parsePodList,
  isTerminated,
  runpodErrorText,
  slugOf,
  toCreateBody,
  type OfferKey,
} from "./runpod-wire.js";

// The marketplace port over RunPod's REST API v2 (docs/marketplace-runpod.md; its OpenAPI file is
// the contract). Transport, rate limits and the market's health live in runpod-http.ts, the JSON
// in runpod-wire.ts, the catalogue's cache in runpod-catalogue.ts; this file says what each answer
// means. RunPod rents on demand only (Secure and Community Cloud): no bids.

export interface RunpodMarketplaceOptions {
  /** Default https://api.runpod.io; calls go under /v2/. */
  baseUrl?: string;
  apiKey: string;
  /** Per attempt, ms. */
  timeoutMs: number;
  /** Retries of a read after the first attempt; default 3. */
  retries?: number;
  /** How long a catalogue answer is kept, ms; default a minute. */
  catalogueTtlMs?: number;
  /** First backoff step of retries, ms; default 500. */
  backoffMs?: number;
  /** After a create whose outcome is unknown: how long its pod is looked for by name before it is sent again, ms. */
  createLookupMs?: number;
  logger?: Logger;
}

export const DEFAULT_RUNPOD_URL = "https://api.runpod.io";
/** GPU counts a search asks for when it names none: the tensor-parallel sizes a model server splits over. */
export const DEFAULT_COUNTS = [1, 2, 4, 8] as const;
/** RunPod's largest machines have 8 GPUs (maxCount); a search for more finds nothing, so it asks nothing. */
const MAX_COUNT = 8;
/** Largest catalogue listOffers returns. */
const CATALOGUE_LIMIT = 1000;
/** A create whose outcome is unknown, with no pod of its name: sent again at most this often (SPEC: at most twice). */
const CREATE_RESENDS = 2;
/** Default of createLookupMs: RunPod lists a pod as soon as it is rented, but a listing can lag. */
const CREATE_LOOKUP_MS = 3_000;
const LOOK_EVERY_MS = 1_000;

/**
 * RunPod bills a pod's `cost` per second of uptime: the GPUs with the vCPUs and memory that come
 * with them. The pod's container disk is billed beside it (billing's diskAmount) and added here
 * (runpod-disk.ts); RunPod bills no traffic.
 */
const COST_INCLUDES =
  "RunPod's cost over the uptime: the GPUs with the vCPUs and memory that come with them, and the pod's container disk at $0.10 per GB-month; RunPod bills no data transfer";

const PODS = "GET /v2/pods";
const POD = "GET /v2/pods/{id}";
const CREATE = "POST /v2/pods";
const DELETE = "DELETE /v2/pods/{id}";

export function createRunpodMarketplace(options: RunpodMarketplaceOptions): Marketplace {
  const backoffMs = options.backoffMs ?? 500;
  const http = createRunpodHttp({
    baseUrl: options.baseUrl ?? DEFAULT_RUNPOD_URL,
    apiKey: options.apiKey,
    timeoutMs: options.timeoutMs,
    retries: options.retries ?? 3,
    backoffMs,
    logger: options.logger,
  });
  const catalogue = createRunpodCatalogue(http, options.catalogueTtlMs ?? 60_000);
  const lostCreates: LostCreatePolicy = {
    lookupMs: options.createLookupMs ?? CREATE_LOOKUP_MS,
    lookEveryMs: LOOK_EVERY_MS,
    resends: CREATE_RESENDS,
    backoffMs,
  };
  const podPath = (id: string) => `/v2/pods/${encodeURIComponent(id)}`;

  async function searchOffers(filter: OfferFilter): Promise<MarketOffer[]> {
    // RunPod rents no interruptible pods.
    if (filter.interruptible === true) return [];
    const diskGb = filter.diskGb ?? DEFAULT_DISK_GB;
    if (filter.offerId !== undefined) {
      const key = parseOfferId(filter.offerId);
      if (!key) return [];
      const types = await catalogue.types({ count: key.count, cloud: key.cloud });
      return filterOffers(offersOf(types, key.count, key.cloud, diskGb), filter);
    }
    const counts = countsOf(filter);
    const answers = await Promise.all(
      CLOUDS.flatMap((cloud) => counts.map(async (count) => offersOf(await catalogue.types({ count, cloud, minCuda: filter.minCuda }), count, cloud, diskGb))),
    );
    return filterOffers(answers.flat(), filter);
  }

  const unknownStates = new Set<string>();
  /** Each state the adapter does not know is logged once; its pods keep their records' status. */
  function noteUnknownStates(pods: readonly MarketInstance[]): void {
    for (const pod of pods) {
      if (pod.unknownState === undefined || unknownStates.has(pod.unknownState)) continue;
      unknownStates.add(pod.unknownState);
      options.logger?.warn({ state: pod.unknownState, instance: pod.id }, "RunPod shows a pod in a state this adapter does not know; its record keeps its stored status");
    }
  }

  /**
   * The pods as the port reports them, their GPU types named as the catalogue names them (a pod
   * names its type by id only). A type not seen yet (after a restart) is looked up in the
   * catalogue: a machine adopted with no GPU memory would fail its template's limits.
   */
  async function named(pods: MarketInstance[]): Promise<MarketInstance[]> {
    noteUnknownStates(pods);
    if (pods.some((pod) => pod.gpuName !== "" && !catalogue.known(pod.gpuName))) await catalogue.types({ count: 1, cloud: "SECURE" });
    return pods.map((pod) => {
      const type = catalogue.known(pod.gpuName);
      return type ? { ...pod, gpuName: type.name, gpuRam: type.memory } : pod;
    });
  }

  async function getInstance(id: string, signal?: AbortSignal): Promise<MarketInstance | undefined> {
    if (!isPodId(id)) return undefined;
    const answer = await http({ endpoint: POD, method: "GET", path: podPath(id), signal });
    if (isGone(answer)) return undefined;
    if (answer.status !== 200) throw unexpectedAnswer(answer, `show pod ${id}`);
    if (isTerminated(answer.body)) return undefined;
    let pod: MarketInstance;
    try {
      pod = parsePod(answer.body, "answer");
    } catch (err) {
      return unreadable(http.health, err);
    }
    return (await named([pod]))[0];
  }

  async function listAll(signal?: AbortSignal): Promise<MarketInstance[]> {
    const answer = await http({ endpoint: PODS, method: "GET", path: "/v2/pods", signal });
    if (answer.status !== 200) throw unexpectedAnswer(answer, "list the pods");
    let pods: MarketInstance[];
    try {
      pods = parsePodList(answer.body);
    } catch (err) {
      return unreadable(http.health, err);
    }
    return named(pods);
  }

  async function destroyInstance(id: string, signal?: AbortSignal): Promise<void> {
    if (!isPodId(id)) return;
    const answer = await http({ endpoint: DELETE, method: "DELETE", path: podPath(id), signal });
    if (answer.status === 204 || answer.status === 200 || isGone(answer)) return;
    throw unexpectedAnswer(answer, `delete pod ${id}`);
  }

  /** The offer's GPU type, count and cloud, as the catalogue knows them, priced with its disk; NotFoundError for any other id. */
  async function offerKeyOf(offerId: string, diskGb: number): Promise<{ key: OfferKey; terms: Pick<MarketOffer, "gpuName" | "numGpus" | "gpuRam" | "dphTotal"> }> {
    const parsed = parseOfferId(offerId);
    if (!parsed) throw offerNotFound(offerId);
    const types = await catalogue.types({ count: parsed.count, cloud: parsed.cloud });
    const type = types.find((t) => slugOf(t.id) === parsed.gpuSlug);
    const price = type?.price[parsed.cloud];
    if (!type || price === undefined || parsed.count > type.maxCount[parsed.cloud]) throw offerNotFound(offerId);
    return {
      key: { cloud: parsed.cloud, count: parsed.count, gpuTypeId: type.id },
      terms: { gpuName: type.name, numGpus: parsed.count, gpuRam: type.memory, dphTotal: withDisk(price * parsed.count, diskGb) },
    };
  }

  async function createOnce(request: CreateMarketInstanceRequest, key: OfferKey, signal?: AbortSignal): Promise<MarketInstance> {
    const answer = await http({ endpoint: CREATE, method: "POST", path: "/v2/pods", body: toCreateBody(request, key), repeatable: false, signal });
    if (answer.status === 201 || answer.status === 200) {
      try {
        return parsePod(answer.body, "answer");
      } catch (err) {
        // Rented, but not readable: looked up by its name like any create whose answer was lost.
        http.health.failed((err as Error).message);
        throw new OutcomeUnknownError(`RunPod rented a pod for ${request.label} but its answer could not be read: ${(err as Error).message}`, { cause: err });
      }
    }
    if (!isDefiniteCreateAnswer(answer.status)) throw unknownCreateAnswer("RunPod", answer.status, runpodErrorText(answer.body));
    throw createError(answer, request.offerId);
  }

  async function createInstance(request: CreateMarketInstanceRequest, signal?: AbortSignal): Promise<MarketInstance> {
    if (request.bidPerHour !== undefined) throw new InvalidInputError("RunPod rents no interruptible pods: a bid cannot be placed there", { extra: { field: "interruptible" } });
    const { key, terms } = await offerKeyOf(request.offerId, request.diskGb ?? DEFAULT_DISK_GB);
    const pod = await createSettlingLost(lostCreates, {
      market: "RunPod",
      label: request.label,
      send: (s) => createOnce(request, key, s),
      find: async (label, s) => (await listAll(s)).find((p) => p.label === label),
      logger: options.logger,
      signal,
    });
    return { ...pod, offerId: request.offerId, gpuName: terms.gpuName, gpuRam: terms.gpuRam };
  }

  return {
    costIncludes: COST_INCLUDES,
    interruptible: false,
    listOffers: () => searchOffers({ limit: CATALOGUE_LIMIT }),
    searchOffers: (filter) => searchOffers(filter),
    createInstance,
    getInstance,
    destroyInstance,
    async listInstances(labelPrefix, signal) {
      return (await listAll(signal)).filter((pod) => pod.label.startsWith(labelPrefix));
    },
    health: () => http.health.health(),
    rateLimitWaits: () => http.rateWaits.read(),
    async close() {
      // Nothing held: fetch's connection pool closes idle sockets by itself.
    },
  };
}

/** The GPU counts a search asks the catalogue for: the filter's, else the usual tensor-parallel sizes. */
function countsOf(filter: OfferFilter): number[] {
  const wanted = filter.numGpus !== undefined ? [filter.numGpus] : (filter.numGpusIn ?? DEFAULT_COUNTS);
  return [...new Set(wanted)].filter((count) => Number.isInteger(count) && count >= 1 && count <= MAX_COUNT);
}

/**
 * RunPod's "no such pod": a 404 with its problem+json body. Any other 404 (a wrong RUNPOD_API_URL,
 * a proxy's page) is not read as gone: that would stop following a pod that still bills.
 */
function isGone(answer: { status: number; body: unknown }): boolean {
  const body = answer.body;
  return answer.status === 404 && typeof body === "object" && body !== null && (body as Record<string, unknown>).status === 404;
}

function isPodId(id: string): boolean {
  return /^[A-Za-z0-9_-]{1,64}$/.test(id);
}

function offerNotFound(offerId: string): NotFoundError {
  return new NotFoundError(`Offer '${offerId}' not found on RunPod`, { extra: { field: "offer_id" } });
}

/**
 * POST /v2/pods' documented refusals: 400 (a rule broken, or no capacity for this GPU: RunPod
 * tells them apart only in words) and 403 (a pool this account cannot use) move on to the next
 * candidate; 422 (the body does not match the contract) is the same on every candidate and is
 * never retried. 401 and 402 were answered by runpod-http.ts (the market is blocked).
 */
function createError(answer: { status: number; body: unknown }, offerId: string): Error {
  const detail = runpodErrorText(answer.body);
  switch (answer.status) {
    case 400:
      return new ConflictError(`RunPod could not place offer '${offerId}'${detail ? `: ${detail}` : ""}`, { extra: { field: "offer_id" } });
    case 403:
      return new ConflictError(`RunPod does not let this account rent offer '${offerId}'${detail ? `: ${detail}` : ""}`, { extra: { field: "offer_id" } });
    case 404:
      return offerNotFound(offerId);
    case 422:
      return new OperationFailedError(`RunPod refused the pod's description (HTTP 422)${detail ? `: ${detail}` : ""}`, {
        extra: { code: "MARKETPLACE_REFUSED_REQUEST" },
      });
    default:
      return unexpectedAnswer(answer, `rent offer '${offerId}'`);
  }
}
