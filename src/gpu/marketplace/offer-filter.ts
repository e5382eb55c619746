import { searchOffers } from "./offers.js";
import type { MarketOffer, OfferFilter } from "./port.js";

// An offer search answered over a catalogue held in memory: how the simulated marketplace and the
// remote contract (which has no search call) answer OfferFilter, and how vast.ai's answer is
// checked again. Same rules as the REST search, plus the bounds on what a host can serve.

export function filterOffers(catalogue: readonly MarketOffer[], filter: OfferFilter): MarketOffer[] {
  const candidates = catalogue.filter((o) => (filter.offerId === undefined || o.id === filter.offerId) && canServe(o, filter));
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

/**
 * The filter's bounds on the machine and its host. A fact the marketplace does not report (the
 * remote contract has no CUDA or reliability) does not exclude an offer; a reported one must pass.
 */
export function canServe(offer: MarketOffer, filter: OfferFilter): boolean {
  const atLeast = (value: number | undefined, floor: number | undefined) => floor === undefined || value === undefined || value >= floor;
  return (
    (filter.numGpusIn === undefined || filter.numGpusIn.includes(offer.numGpus)) &&
    (filter.minTotalGpuRam === undefined || offer.numGpus * offer.gpuRam >= filter.minTotalGpuRam) &&
    atLeast(offer.cudaMaxGood, filter.minCuda) &&
    atLeast(offer.reliability, filter.minReliability) &&
    (!filter.directPort || offer.directPortCount === undefined || offer.directPortCount >= 1)
  );
}
