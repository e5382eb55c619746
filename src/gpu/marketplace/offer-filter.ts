import { searchOffers } from "./offers.js";
import type { MarketOffer, OfferFilter } from "./port.js";

// An offer search answered over a catalogue held in memory: how the simulated marketplace and the
// remote contract (which has no search call) answer OfferFilter. Same rules as the REST search.

export function filterOffers(catalogue: readonly MarketOffer[], filter: OfferFilter): MarketOffer[] {
  const candidates = filter.offerId === undefined ? catalogue : catalogue.filter((o) => o.id === filter.offerId);
  return searchOffers(candidates, {
    gpuName: filter.gpuName,
    maxPrice: filter.maxPrice,
    minGpuRam: filter.minGpuRam,
    numGpus: filter.numGpus,
    rentable: filter.rentable,
    sortBy: filter.order,
    limit: filter.limit,
  }).offers;
}
