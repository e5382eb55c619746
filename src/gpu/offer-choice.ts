import type { Template } from "../../gen/gpu/v1/gpu_service_pb.js";
import { ConflictError, excerpt, InvalidInputError, NotFoundError } from "../errors.js";
import type { MarketOffer } from "./marketplace/marketplace.js";

// Which offer a creation rents. A template is a cost guard: the offer must have at least the
// template's GPU RAM and cost at most its price cap, whether it is picked here or named.

function limitsOf(template: Template): { minGpuRam: number; maxPrice: number } {
  return { minGpuRam: template.config?.minGpuRam ?? 0, maxPrice: template.config?.maxPrice ?? 0 };
}

/** The offer named by offerId, checked against the template; or the cheapest one that fits it. */
export function chooseOffer(catalogue: readonly MarketOffer[], template: Template | undefined, offerId: string | undefined): MarketOffer {
  if (offerId !== undefined) return namedOffer(catalogue, template, offerId);
  if (!template) throw new InvalidInputError("offer_id is required when no template_name is given", { extra: { field: "offer_id" } });
  const { minGpuRam, maxPrice } = limitsOf(template);
  const cheapest = catalogue
    .filter((o) => o.rentable && o.gpuRam >= minGpuRam && o.dphTotal <= maxPrice)
    .sort((a, b) => a.dphTotal - b.dphTotal || a.id.localeCompare(b.id))[0];
  if (!cheapest) {
    throw new NotFoundError(
      `No rentable offer matches template '${template.name}' (min_gpu_ram ${minGpuRam} GB, max_price $${maxPrice}/h)`,
    );
  }
  return cheapest;
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
