import { DomainError, MarketBlockedError, messageOf, OutcomeUnknownError, ResourceExhaustedError, UnavailableError } from "../../errors.js";
import type { Knex } from "knex";
import { failCreation } from "./creation-log.js";
import { reserveOffer } from "./fleet-reservation.js";
import { elapsedSince, type GpuContext } from "../gpu-context.js";
import { gpuInfoJson, type InstanceRecord, type NewInstance, type OfferFacts } from "../store/instance-store.js";
import { onMachine, type LaunchPlan } from "./launch-plan.js";
import type { MarketInstance } from "../marketplace/port.js";
import type { Candidate } from "./bid-choice.js";
import { isRefusal, MAX_OFFERS_TRIED } from "./offer-choice.js";

// Reserves an offer (writing the creating record) and rents it. An automatic pick whose offer
// was refused at rent time (taken meanwhile, no capacity, its market refusing the account) moves
// the record on to the next matching offer in any market, up to MAX_OFFERS_TRIED offers; a named
// offer answers 409 at once. Every failure after the record was
// written leaves it failed with one success=false log record, except a create whose outcome the
// marketplace left unknown: its record stays creating, so that the reconciler adopts the machine
// if one shows up under its label, and fails the record if none does within the creation grace.

/**
 * What a control round's creation must still hold at its two steps (SPEC.md section 2, "Control
 * loops survive their database"); each throws when it does not, and nothing is rented.
 */
export interface CreationFence {
  /** In the transaction that writes the record: the replica may still be written (its row was not removed). */
  claimRecord(trx: Knex.Transaction): Promise<void>;
  /** Before each marketplace create: this process may still spend (it still leads). */
  beforeRent(): Promise<void>;
}

export interface RentalRequest {
  instanceId: string;
  plan: LaunchPlan;
  /** Offers in order of preference, each with its bid when it is rented as one (offer-choice.ts, bid-choice.ts). */
  candidates: readonly Candidate[];
  /** True when the service picked the offer (no offer_id): only then is another offer tried. */
  autoPick: boolean;
  started: number;
  templateName: string | null;
  /** Who asked for the instance (src/actor.ts). */
  actor: string;
  /** The creating record for an offer. */
  newRecord(offer: OfferFacts): NewInstance;
  /** A control round's conditions on writing the record and on renting (creation.ts). */
  fence?: CreationFence;
}

export interface Rental {
  record: InstanceRecord;
  market: MarketInstance;
}

export async function rentOffer(ctx: GpuContext, request: RentalRequest): Promise<Rental> {
  let candidates = request.candidates;
  let record: InstanceRecord | undefined;
  for (let tried = 1; ; tried++) {
    record = await reserve(ctx, request, candidates, record);
    try {
      await request.fence?.beforeRent();
    } catch (err) {
      await failCreation(ctx, request.actor, record, messageOf(err), request.started);
      throw err;
    }
    try {
      return { record, market: await rent(ctx, record, request.plan) };
    } catch (err) {
      if (err instanceof OutcomeUnknownError) throw leftCreating(ctx, record, err);
      const error = asMarketplaceError(err, "The marketplace did not create the instance");
      const taken = record.offerId;
      const blocked = error instanceof MarketBlockedError ? record.market : undefined;
      candidates = candidates.filter((o) => o.id !== taken && (blocked === undefined || o.market !== blocked));
      if (!request.autoPick || !isRefusal(error) || tried >= MAX_OFFERS_TRIED || candidates.length === 0) {
        await failCreation(ctx, request.actor, record, error.message, request.started);
        throw error;
      }
      ctx.logger.info(
        { instance_id: record.instanceId, offer_id: taken, market: record.market, reason: error.message },
        "offer refused at rent time; trying the next candidate in any market",
      );
    }
  }
}

function leftCreating(ctx: GpuContext, record: InstanceRecord, err: OutcomeUnknownError): UnavailableError {
  ctx.logger.warn({ err, instance_id: record.instanceId, offer_id: record.offerId }, "create outcome unknown; the record stays creating for the reconciler");
  return new UnavailableError(`${err.message} (instance ${record.instanceId})`, {
    cause: err,
    extra: { instance_id: record.instanceId, status: "creating" },
  });
}

/** Writes the creating record for the first free candidate, or moves `current` on to it. */
async function reserve(
  ctx: GpuContext,
  request: RentalRequest,
  candidates: readonly Candidate[],
  current: InstanceRecord | undefined,
): Promise<InstanceRecord> {
  try {
    return await reserveOffer(ctx, {
      instanceId: request.instanceId,
      candidates,
      fleetCap: ctx.maxFleetDph,
      write: async (offer, trx) => {
        if (current) return ctx.instances.retarget(current.instanceId, offer, onMachine(request.plan, offer.gpuInfo.numGpus).startCommand, trx);
        await request.fence?.claimRecord(trx);
        return ctx.instances.insertCreating(request.newRecord(offer), trx);
      },
    });
  } catch (err) {
    if (current) await failCreation(ctx, request.actor, current, (err as Error).message, request.started);
    else if (err instanceof ResourceExhaustedError) await logRefusal(ctx, request, err);
    throw err;
  }
}

/** The one success=false create_instance log record of a create refused before any record existed. */
async function logRefusal(ctx: GpuContext, request: RentalRequest, error: ResourceExhaustedError): Promise<void> {
  const offer = request.candidates[0]!;
  await ctx.logs.append({
    actor: request.actor,
    instanceId: null,
    operation: "create_instance",
    command: `create ${offer.id} image=${request.plan.image}`,
    result: error.message,
    executionTime: elapsedSince(request.started),
    success: false,
    metadata: {
      ...error.extra,
      template_name: request.templateName,
      gpu_info: gpuInfoJson(offer),
    },
  });
}

function rent(ctx: GpuContext, record: InstanceRecord, plan: LaunchPlan): Promise<MarketInstance> {
  return ctx.marketplace.createInstance({
    offerId: record.offerId,
    label: record.marketLabel,
    image: plan.image,
    diskGb: plan.diskGb,
    ...onMachine(plan, record.gpuInfo.numGpus),
    terms: { ...record.gpuInfo, dphTotal: record.costPerHour },
    ...(record.bidPerHour !== null && { bidPerHour: record.bidPerHour }),
    ...(plan.llmPort !== undefined ? { llmPort: plan.llmPort, llmModelName: plan.llmModelName } : {}),
  });
}

export function asMarketplaceError(err: unknown, message: string): DomainError {
  if (err instanceof DomainError) return err;
  return new UnavailableError(message, { cause: err });
}
