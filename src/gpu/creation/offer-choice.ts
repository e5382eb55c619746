import type { Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { ConflictError, excerpt, InvalidInputError, MarketBlockedError, NotFoundError } from "../../errors.js";
import { canServe } from "../marketplace/offer-filter.js";
import type { MarketOffer, OfferFilter } from "../marketplace/port.js";

// Which offer a creation rents. A template is a cost guard: the offer must have at least the
// template's GPU RAM and cost at most its price cap, whether it is picked here or named. It must
// also be a machine that can serve the template's model: enough GPU memory over all its GPUs, a GPU
// count tensor parallelism can split the model over, a driver with the image's CUDA, and a direct
// port for the model server.

function limitsOf(template: Template): { minGpuRam: number; maxPrice: number } {
  return { minGpuRam: template.config?.minGpuRam ?? 0, maxPrice: template.config?.maxPrice ?? 0 };
}

/** The bounds of OfferFilter a template's model needs (absent ones are not set on the template). */
export function servingNeeds(template: Template): Pick<OfferFilter, "minTotalGpuRam" | "numGpusIn" | "minCuda" | "directPort"> {
  const config = template.config;
  return {
    ...(config?.minTotalGpuRam ? { minTotalGpuRam: config.minTotalGpuRam } : {}),
    ...(config?.tensorParallelSizes.length ? { numGpusIn: config.tensorParallelSizes } : {}),
    ...(config?.minCuda ? { minCuda: config.minCuda } : {}),
    directPort: true,
  };
}

/** How many offers an automatic pick tries at the marketplace before answering 409. */
export const MAX_OFFERS_TRIED = 5;
/** Offers an automatic pick asks the marketplace for: enough for every create in flight to find its own. */
export const CANDIDATES_ASKED = 100;

/**
 * What a creation asks the marketplace for: the named offer, rentable or not (so that the answer
 * can say why it cannot be rented), or the cheapest rentable offers within the template's limits,
 * priced with the disk the create will ask for. Undefined when there is nothing to ask.
 */
export function candidateFilter(template: Template | undefined, offerId: string | undefined, diskGb: number): OfferFilter | undefined {
  if (offerId !== undefined) return { offerId, diskGb };
  if (!template) return undefined;
  const { minGpuRam, maxPrice } = limitsOf(template);
  return { rentable: true, minGpuRam, maxPrice, ...servingNeeds(template), order: "price", limit: CANDIDATES_ASKED, diskGb };
}

/**
 * The offers a creation may rent, best first: the one named by offerId (checked against the
 * template), or every rentable offer that fits the template, cheapest first.
 */
export function offerCandidates<T extends MarketOffer>(
  catalogue: readonly T[],
  template: Template | undefined,
  offerId: string | undefined,
  diskGb: number,
): T[] {
  if (offerId !== undefined) return [namedOffer(catalogue, template, offerId, diskGb)];
  const fitted = autoPickTemplate(template);
  const fitting = fittingOffers(catalogue, fitted);
  if (fitting.length === 0) throw noOfferMatches(fitted);
  return fitting;
}

/** The template an automatic pick fits offers to: without one, an offer must be named. */
export function autoPickTemplate(template: Template | undefined): Template {
  if (!template) throw new InvalidInputError("offer_id is required when no template_name is given", { extra: { field: "offer_id" } });
  return template;
}

/** The rentable offers of a search that fit the template (its limits, and a machine that serves its model), cheapest first; maybe none. */
export function fittingOffers<T extends MarketOffer>(catalogue: readonly T[], template: Template): T[] {
  const { minGpuRam, maxPrice } = limitsOf(template);
  return catalogue
    .filter((o) => o.rentable && o.gpuRam >= minGpuRam && o.dphTotal <= maxPrice && canServe(o, servingNeeds(template)))
    .sort((a, b) => a.dphTotal - b.dphTotal || a.id.localeCompare(b.id));
}

/** The answer when no offer fits the template: it names the template's limits. */
export function noOfferMatches(template: Template): NotFoundError {
  const { minGpuRam, maxPrice } = limitsOf(template);
  return new NotFoundError(
    `No rentable offer matches template '${template.name}' (min_gpu_ram ${minGpuRam} GB, max_price $${maxPrice}/h, ${machineNeedsText(template)})`,
  );
}

/** Every adapter reports an offer rented by someone else as a ConflictError about the field offer_id. */
export function isOfferTaken(err: unknown): boolean {
  return err instanceof ConflictError && err.extra?.field === "offer_id";
}

/**
 * A refusal at rent time that an automatic pick moves on from, to the next candidate in any
 * market: the offer taken or without capacity (ConflictError), or its market refusing the account
 * (MarketBlockedError, after which that market's other offers are not tried either).
 */
export function isRefusal(err: unknown): boolean {
  return err instanceof ConflictError || err instanceof MarketBlockedError;
}

export function offerTaken(offerId: string, why = "it is rented by another instance"): ConflictError {
  return new ConflictError(`Offer '${offerId}' is not rentable any more: ${why}`, { extra: { field: "offer_id" } });
}

function namedOffer<T extends MarketOffer>(catalogue: readonly T[], template: Template | undefined, offerId: string, diskGb: number): T {
  const offer = catalogue.find((o) => o.id === offerId);
  if (!offer) throw new NotFoundError(`Offer '${excerpt(offerId)}' not found`, { extra: { field: "offer_id" } });
  if (!offer.rentable) throw new ConflictError(`Offer '${excerpt(offerId)}' is not rentable any more`, { extra: { field: "offer_id" } });
  if (template) {
    checkTemplateLimits(offer, template, offer.dphTotal);
    checkServing(offer, template);
  }
  checkDisk(offer, template, diskGb);
  return offer;
}

/** Throws InvalidInputError when the host has less disk free than the instance asks for. */
function checkDisk(offer: MarketOffer, template: Template | undefined, diskGb: number): void {
  if (offer.diskSpaceGb === undefined || offer.diskSpaceGb >= diskGb) return;
  const whose = template ? `template '${template.name}' needs for its image and model weights` : "an instance needs";
  throw new InvalidInputError(`Offer '${offer.id}' has ${Math.floor(offer.diskSpaceGb)} GB of disk free, below the ${diskGb} GB ${whose}`, {
    extra: { field: "offer_id", limit: "disk" },
  });
}

function machineNeedsText(template: Template): string {
  const config = template.config;
  return [
    `min_total_gpu_ram ${config?.minTotalGpuRam ?? 0} GB`,
    `num_gpus in ${(config?.tensorParallelSizes ?? []).join("/")}`,
    `min_cuda ${config?.minCuda ?? 0}`,
    "a direct port",
  ].join(", ");
}

/** Throws InvalidInputError naming the first thing the offer lacks to serve the template's model. */
function checkServing(offer: MarketOffer, template: Template): void {
  const needs = servingNeeds(template);
  const refuse = (limit: string, why: string) =>
    new InvalidInputError(`Offer '${offer.id}' ${why}, so it cannot serve template '${template.name}'`, { extra: { field: "offer_id", limit } });
  if (needs.numGpusIn && !canServe(offer, { numGpusIn: needs.numGpusIn })) {
    throw refuse("tensor_parallel_sizes", `has ${offer.numGpus} GPUs, not one of ${needs.numGpusIn.join("/")} its model can be split over`);
  }
  if (!canServe(offer, { minTotalGpuRam: needs.minTotalGpuRam })) {
    throw refuse("min_total_gpu_ram", `has ${offer.numGpus * offer.gpuRam} GB of GPU RAM in all, below the ${needs.minTotalGpuRam} GB its model needs`);
  }
  if (!canServe(offer, { minCuda: needs.minCuda })) {
    throw refuse("min_cuda", `runs CUDA up to ${offer.cudaMaxGood}, below the ${needs.minCuda} its image needs`);
  }
  if (!canServe(offer, { directPort: true })) throw refuse("direct_port", "has no direct port for the model server");
}

/** Throws InvalidInputError naming the template limit the offer (at the given price) violates. */
export function checkTemplateLimits(offer: Pick<MarketOffer, "id" | "gpuRam">, template: Template, price: number): void {
  const { minGpuRam, maxPrice } = limitsOf(template);
  if (offer.gpuRam < minGpuRam) {
    throw new InvalidInputError(
      `Offer '${offer.id}' has ${offer.gpuRam} GB of GPU RAM, below the min_gpu_ram of ${minGpuRam} GB of template '${template.name}'`,
      { extra: { field: "offer_id", limit: "min_gpu_ram" } },
    );
  }
  if (price > maxPrice) {
    throw new InvalidInputError(
      `Offer '${offer.id}' costs $${price}/h, above the max_price of $${maxPrice}/h of template '${template.name}'`,
      { extra: { field: "offer_id", limit: "max_price" } },
    );
  }
}
