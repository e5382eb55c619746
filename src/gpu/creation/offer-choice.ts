import type { Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { ConflictError, excerpt, InvalidInputError, NotFoundError } from "../../errors.js";
import type { MarketOffer, OfferFilter } from "../marketplace/port.js";

// Which offer a creation rents. A template is a cost guard: the offer must have at least the
// template's GPU RAM and cost at most its price cap, whether it is picked here or named.

function limitsOf(template: Template): { minGpuRam: number; maxPrice: number } {
  return { minGpuRam: template.config?.minGpuRam ?? 0, maxPrice: template.config?.maxPrice ?? 0 };
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
  return { rentable: true, minGpuRam, maxPrice, order: "price", limit: CANDIDATES_ASKED, diskGb };
}

/**
 * The offers a creation may rent, best first: the one named by offerId (checked against the
 * template), or every rentable offer that fits the template, cheapest first.
 */
export function offerCandidates(catalogue: readonly MarketOffer[], template: Template | undefined, offerId: string | undefined): MarketOffer[] {
  if (offerId !== undefined) return [namedOffer(catalogue, template, offerId)];
  if (!template) throw new InvalidInputError("offer_id is required when no template_name is given", { extra: { field: "offer_id" } });
  const { minGpuRam, maxPrice } = limitsOf(template);
  const fitting = catalogue
    .filter((o) => o.rentable && o.gpuRam >= minGpuRam && o.dphTotal <= maxPrice)
    .sort((a, b) => a.dphTotal - b.dphTotal || a.id.localeCompare(b.id));
  if (fitting.length === 0) {
    throw new NotFoundError(
      `No rentable offer matches template '${template.name}' (min_gpu_ram ${minGpuRam} GB, max_price $${maxPrice}/h)`,
    );
  }
  return fitting;
}

/** Every adapter reports an offer rented by someone else as a ConflictError about the field offer_id. */
export function isOfferTaken(err: unknown): boolean {
  return err instanceof ConflictError && err.extra?.field === "offer_id";
}

export function offerTaken(offerId: string, why = "it is rented by another instance"): ConflictError {
  return new ConflictError(`Offer '${offerId}' is not rentable any more: ${why}`, { extra: { field: "offer_id" } });
}

function namedOffer(catalogue: readonly MarketOffer[], template: Template | undefined, offerId: string): MarketOffer {
  const offer = catalogue.find((o) => o.id === offerId);
  if (!offer) throw new NotFoundError(`Offer '${excerpt(offerId)}' not found`, { extra: { field: "offer_id" } });
  if (!offer.rentable) throw new ConflictError(`Offer '${excerpt(offerId)}' is not rentable any more`, { extra: { field: "offer_id" } });
  if (template) checkTemplateLimits(offer, template, offer.dphTotal);
  return offer;
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
