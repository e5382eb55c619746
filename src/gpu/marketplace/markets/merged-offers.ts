import type { MarketOffer, OfferOrder } from "../port.js";

// Several markets' answers to one offer search, as one: each market answered in the search's
// order, and the merge keeps it (ties by price, then id, so the answer is stable), up to the limit.

const DESCENDING: ReadonlySet<OfferOrder> = new Set(["gpu_ram", "num_gpus"]);

const VALUE: Record<OfferOrder, (offer: MarketOffer) => number> = {
  price: (o) => o.dphTotal,
  gpu_ram: (o) => o.gpuRam,
  num_gpus: (o) => o.numGpus,
  price_per_gpu: (o) => (o.numGpus > 0 ? o.dphTotal / o.numGpus : o.dphTotal),
};

export function mergedOffers(offers: readonly MarketOffer[], order: OfferOrder = "price", limit?: number): MarketOffer[] {
  const sign = DESCENDING.has(order) ? -1 : 1;
  const value = VALUE[order];
  const sorted = [...offers].sort((a, b) => sign * (value(a) - value(b)) || a.dphTotal - b.dphTotal || a.id.localeCompare(b.id));
  return limit === undefined ? sorted : sorted.slice(0, limit);
}
