import { InvalidInputError } from "../../errors.js";
import type { MarketOffer } from "./port.js";

// Offer search: validation of the filters, filtering and sorting of the marketplace catalogue.
// Pure: the catalogue is a few hundred offers, read from the marketplace on every search.

export const OFFER_SORT_KEYS = ["price", "gpu_ram", "num_gpus", "price_per_gpu"] as const;
export type OfferSortKey = (typeof OFFER_SORT_KEYS)[number];
export type SortOrder = "ascending" | "descending";

const ORDER: Record<OfferSortKey, SortOrder> = {
  price: "ascending",
  gpu_ram: "descending",
  num_gpus: "descending",
  price_per_gpu: "ascending",
};

export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 1000;

export interface OfferQuery {
  gpuName?: string;
  maxPrice?: number;
  minGpuRam?: number;
  numGpus?: number;
  rentable?: boolean;
  sortBy?: string;
  limit?: number;
}

export interface OfferSearchResult {
  offers: MarketOffer[];
  total: number;
  filteredCount: number;
  sortBy: OfferSortKey;
  order: SortOrder;
}

/** "RTX 4090", "rtx_4090" and "4090" all reduce to comparable text. */
export function normalizeGpuName(name: string): string {
  return name.toLowerCase().replace(/[\s_-]+/g, "");
}

export function pricePerGpu(offer: MarketOffer): number {
  return offer.numGpus > 0 ? offer.dphTotal / offer.numGpus : offer.dphTotal;
}

/** Throws InvalidInputError naming the first field out of bounds. */
export function validateOfferQuery(query: OfferQuery): void {
  nonNegative(query.maxPrice, "max_price");
  nonNegative(query.minGpuRam, "min_gpu_ram");
  if (query.numGpus !== undefined && query.numGpus < 1) {
    throw bad("num_gpus", `num_gpus must be at least 1, got ${query.numGpus}`);
  }
  validateLimit(query.limit);
  if (query.sortBy !== undefined && !(OFFER_SORT_KEYS as readonly string[]).includes(query.sortBy)) {
    throw bad("sort_by", `sort_by must be one of ${OFFER_SORT_KEYS.join(", ")}, got '${query.sortBy}'`);
  }
}

/** limit: 1..1000. */
export function validateLimit(limit: number | undefined): void {
  if (limit !== undefined && (limit < 1 || limit > MAX_LIMIT)) {
    throw bad("limit", `limit must be from 1 to ${MAX_LIMIT}, got ${limit}`);
  }
}

function nonNegative(value: number | undefined, field: string): void {
  if (value !== undefined && !(Number.isFinite(value) && value >= 0)) {
    throw bad(field, `${field} must be a number >= 0, got ${value}`);
  }
}

function bad(field: string, message: string): InvalidInputError {
  return new InvalidInputError(message, { extra: { field } });
}

export function matchesOffer(offer: MarketOffer, query: OfferQuery): boolean {
  const wanted = query.gpuName ? normalizeGpuName(query.gpuName) : "";
  return (
    (wanted === "" || normalizeGpuName(offer.gpuName).includes(wanted)) &&
    (query.maxPrice === undefined || offer.dphTotal <= query.maxPrice) &&
    (query.minGpuRam === undefined || offer.gpuRam >= query.minGpuRam) &&
    (query.numGpus === undefined || offer.numGpus === query.numGpus) &&
    (query.rentable === undefined || offer.rentable === query.rentable)
  );
}

const SORT_VALUE: Record<OfferSortKey, (offer: MarketOffer) => number> = {
  price: (o) => o.dphTotal,
  gpu_ram: (o) => o.gpuRam,
  num_gpus: (o) => o.numGpus,
  price_per_gpu: pricePerGpu,
};

/** Filters, sorts (ties by price, then id, so results are stable) and applies the limit. */
export function searchOffers(catalogue: readonly MarketOffer[], query: OfferQuery): OfferSearchResult {
  validateOfferQuery(query);
  const sortBy = (query.sortBy ?? "price") as OfferSortKey;
  const order = ORDER[sortBy];
  const value = SORT_VALUE[sortBy];
  const sign = order === "ascending" ? 1 : -1;
  const offers = catalogue
    .filter((offer) => matchesOffer(offer, query))
    .sort((a, b) => sign * (value(a) - value(b)) || a.dphTotal - b.dphTotal || a.id.localeCompare(b.id))
    .slice(0, query.limit ?? DEFAULT_LIMIT);
  return { offers, total: catalogue.length, filteredCount: offers.length, sortBy, order };
}
