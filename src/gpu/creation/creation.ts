import type { JsonObject } from "@bufbuild/protobuf";
import type { Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { DomainError, excerpt, InvalidInputError, NotFoundError, OperationFailedError } from "../../errors.js";
import { completeCreation } from "./creation-log.js";
import { parseCustomConfig } from "./custom-config.js";
import type { GpuContext } from "../gpu-context.js";
import { machineRefOf, type InstanceRecord } from "../store/instance-store.js";
import { launchPlanOf, newModelApiKey, onMachine } from "./launch-plan.js";
import { limitsFor } from "../money/limits.js";
import { releaseMachine, releaseTwin } from "../lifecycle/machine-release.js";
import { isTerminal } from "../store/status.js";
import type { MarketInstance, MarketOffer } from "../marketplace/port.js";
import { asMarketplaceError, rentOffer, type CreationFence } from "./offer-rental.js";
import { checkBudget, checkFleetCap, type ReplicaBudget } from "./billed-rate.js";
import { autoPickTemplate, candidateFilter, checkTemplateLimits, fittingOffers, noOfferMatches, offerCandidates } from "./offer-choice.js";
import { findTemplate } from "./templates.js";
import { asBids, spreadOver, type Candidate, type RentalKind } from "./bid-choice.js";
import { nothingToRentText, slotOffers, spreadOverMarkets, type NothingToRent, type SlotChoice } from "./slot-offers.js";

// Crash-safe creation: the record (its instance_id is the label the marketplace instance
// carries) is written before the marketplace call and completed after it. A crash in between
// leaves a creating record and a labelled marketplace instance, which the reconciler adopts. An
// error in between that the process survives destroys the machine (machine-release.ts).

export interface CreationHooks {
  /** Runs between the marketplace call and the database update; a throw here stands for a crash at that point. */
  afterMarketplaceCreate?(instanceId: string): void | Promise<void>;
}

export interface CreationRequest {
  templateName?: string;
  offerId?: string;
  customConfig?: JsonObject;
  /** Who asked (src/actor.ts): written on every log record of the creation. */
  actor: string;
  /**
   * For an endpoint's replicas: the instance_id reserved beforehand (the endpoint writes it down
   * before the creation starts), the endpoint the record names, a price cap tighter than the
   * template's (what is left of the endpoint's budget), and the fence of the control round.
   */
  replicaOf?: { instanceId: string; endpoint: string; priceCap: number; fence?: CreationFence };
  /**
   * Rent an interruptible machine (an automatic pick only; a named offer is rented on-demand): the
   * cheapest offer that fits as a bid at its minimum bid x (1 + bidMargin), if it costs
   * less than every fitting on-demand offer and at most 90% of `replacing` ($/h: the cost of the
   * fallback it would replace); else a fitting on-demand offer, unless `onDemand` is false; else
   * nothing (a NotFoundError saying why). slot-offers.ts chooses. Only where the marketplace rents
   * interruptible machines; elsewhere a 400 naming `interruptible`.
   */
  interruptible?: { bidMargin: number; onDemand?: boolean; replacing?: number };
  /** The offers to try, chosen beforehand by chooseInterruptible for this very request: no second search. */
  chosen?: readonly Candidate[];
  /** Machines to keep off while offers on others fit (an endpoint's other replicas): they come last. */
  avoidMachineIds?: readonly string[];
  /** The markets an automatic pick may rent on (an endpoint's capacity.markets); absent or empty: every one. */
  markets?: readonly string[];
  /** Spread over markets (an endpoint's capacity.spread_markets): the markets its other replicas are on (slot-offers.ts). */
  replicaMarkets?: readonly string[];
}

export interface CreationResult {
  instanceId: string;
  templateName: string;
  message: string;
  /** The model server's key, answered once to the creator; null without a model server. */
  modelApiKey: string | null;
}

export async function createInstance(ctx: GpuContext, request: CreationRequest, hooks: CreationHooks = {}): Promise<CreationResult> {
  const replicaOf = request.replicaOf;
  const named = templateOf(request.templateName);
  const template = capped(named, replicaOf?.priceCap);
  const custom = parseCustomConfig(request.customConfig, template !== undefined);
  // Every model server gets a key of its own, so that its public port serves nobody else.
  const modelApiKey = template ? newModelApiKey() : null;
  const plan = launchPlanOf(template, custom, modelApiKey ?? undefined);
  const offerId = request.offerId || undefined;
  const candidates = await candidatesFor(ctx, request, template, offerId, plan.diskGb);
  const instanceId = replicaOf?.instanceId ?? (await ctx.instances.nextInstanceId());
  const marketLabel = (await ctx.deployment()).labelOf(instanceId, replicaOf?.endpoint);
  ctx.inFlight.add(instanceId);
  try {
    const started = Date.now();
    const templateName = template?.name ?? null;
    const limits = limitsFor(template, custom);
    const { record, market } = await rentOffer(ctx, {
      instanceId,
      plan,
      candidates,
      autoPick: offerId === undefined,
      started,
      templateName,
      actor: request.actor,
      fence: replicaOf?.fence,
      newRecord: (offer) => ({
        instanceId,
        marketLabel,
        ...offer,
        imageName: plan.image,
        templateName,
        startCommand: onMachine(plan, offer.gpuInfo.numGpus).startCommand,
        autoDestroy: plan.autoDestroy,
        modelApiKey,
        endpoint: replicaOf?.endpoint ?? null,
        priceCap: template?.config?.maxPrice ?? null,
        ...limits,
      }),
    });
    await hooks.afterMarketplaceCreate?.(instanceId);
    const budget = replicaOf && { endpoint: replicaOf.endpoint, left: replicaOf.priceCap };
    await completeOrRelease(ctx, request.actor, record, market, { template: named, budget }, started);
    return { instanceId, templateName: template?.name ?? "", message: messageOf(instanceId, template, market), modelApiKey };
  } finally {
    ctx.inFlight.delete(instanceId);
  }
}

/**
 * Whether any rentable offer fits the template within its own max_price (one offer search): an
 * endpoint's launch found nothing under its budget, and this tells a budget that holds it back
 * from a market where nothing fits at all.
 */
export async function anyOfferFits(ctx: GpuContext, templateName: string, customConfig: JsonObject, markets?: readonly string[]): Promise<boolean> {
  const template = templateOf(templateName);
  const plan = launchPlanOf(template, parseCustomConfig(customConfig, template !== undefined), undefined);
  return fittingOffers(await offersFor(ctx, template, undefined, plan.diskGb, { markets }), autoPickTemplate(template)).length > 0;
}

/**
 * What an interruptible creation would rent, searched now (slot-offers.ts), for a caller that acts
 * on "nothing to rent" before it creates anything (the way back from a fallback: no cheaper bid is
 * a wait, not a failed creation), within `priceCap` as a replica's creation would be; the
 * candidates go back in as `chosen`.
 */
export async function chooseInterruptible(ctx: GpuContext, request: CreationRequest, priceCap?: number): Promise<SlotChoice> {
  const template = capped(templateOf(request.templateName), priceCap ?? request.replicaOf?.priceCap);
  const plan = launchPlanOf(template, parseCustomConfig(request.customConfig, template !== undefined), undefined);
  return slotChoice(ctx, request, template, plan.diskGb);
}

function templateOf(name: string | undefined): Template | undefined {
  if (!name) return undefined;
  const template = findTemplate(name);
  if (!template) {
    throw new InvalidInputError(`Template '${excerpt(name)}' not found; templates: high_performance, budget, research`, {
      extra: { field: "template_name" },
    });
  }
  return template;
}

/** The template with its max_price lowered to `cap`: offer choice and the rented-price check both honour it. */
function capped(template: Template | undefined, cap: number | undefined): Template | undefined {
  if (!template?.config || cap === undefined || cap >= template.config.maxPrice) return template;
  return { ...template, config: { ...template.config, maxPrice: cap } };
}

/**
 * The offers the creation may rent, best first (offer-choice.ts), over every configured market:
 * for an interruptible creation, both rental kinds (bids, on-demand) searched once each, fitted to
 * the template, and chosen between by slot-offers.ts.
 */
async function candidatesFor(
  ctx: GpuContext,
  request: CreationRequest,
  template: Template | undefined,
  offerId: string | undefined,
  diskGb: number,
): Promise<Candidate[]> {
  if (offerId === undefined && request.interruptible && request.chosen) return [...request.chosen];
  if (offerId !== undefined || !request.interruptible) {
    const offers = await offersFor(ctx, template, offerId, diskGb, { markets: request.markets });
    const candidates = offerCandidates(offers, template, offerId, diskGb);
    const overMarkets = offerId === undefined && request.replicaMarkets ? spreadOverMarkets(candidates, request.replicaMarkets) : candidates;
    return spreadOver(overMarkets, request.avoidMachineIds);
  }
  const choice = await slotChoice(ctx, request, template, diskGb);
  if (choice.none) throw nothingToRent(choice.none, autoPickTemplate(template));
  return choice.candidates;
}

/** An interruptible creation's offers: both rental kinds searched once each, fitted, chosen between by slot-offers.ts, spread. */
async function slotChoice(ctx: GpuContext, request: CreationRequest, template: Template | undefined, diskGb: number): Promise<SlotChoice> {
  const interruptible = request.interruptible!;
  if (!ctx.marketplace.interruptible) {
    throw new InvalidInputError("This marketplace rents no interruptible machines", { extra: { field: "interruptible" } });
  }
  const fitted = autoPickTemplate(template);
  const markets = request.markets;
  const onDemandAllowed = interruptible.onDemand !== false;
  const [bidOffers, onDemandOffers] = await Promise.all([
    bidOffersFor(ctx, fitted, diskGb, markets, onDemandAllowed),
    offersFor(ctx, fitted, undefined, diskGb, { kind: "on-demand", markets }),
  ]);
  const choice = slotOffers({
    bids: fittingOffers(asBids(bidOffers, interruptible.bidMargin), fitted),
    // Searched and fitted even when it may not be rented: every bid is compared with it.
    onDemand: fittingOffers(onDemandOffers, fitted),
    onDemandAllowed,
    replacing: interruptible.replacing,
    replicaMarkets: request.replicaMarkets,
  });
  return choice.none ? choice : { candidates: spreadOver(choice.candidates, request.avoidMachineIds) };
}

/**
 * The offers that may be rented as bids (from the markets that rent them). One market's failure
 * never hides another's offers (SPEC.md section 2, "Several marketplaces"): when every bid market
 * fails and on-demand may be rented, the slot goes on with no bid, to its fallback in any market
 * that answers; a bid-only slot fails with the search.
 */
async function bidOffersFor(ctx: GpuContext, template: Template, diskGb: number, markets: readonly string[] | undefined, onDemandAllowed: boolean) {
  try {
    return await offersFor(ctx, template, undefined, diskGb, { kind: "bid", markets });
  } catch (err) {
    if (!onDemandAllowed) throw err;
    ctx.logger.warn({ err }, "the bid markets did not answer; the slot rents on-demand as its fallback");
    return [];
  }
}

/** The creation's answer when nothing may be rented (a launch that counts as failed): it says why. */
function nothingToRent(none: NothingToRent, template: Template): NotFoundError {
  if (none.kind === "nothing-fits") return noOfferMatches(template);
  return new NotFoundError(`No interruptible machine for template '${template.name}': ${nothingToRentText(none)}`);
}

/**
 * The markets' answer to the creation's offer search (empty when there is nothing to ask); of the
 * `bid` kind, only the offers of the markets that rent bids, priced as bids; only `markets`'
 * offers when named.
 */
async function offersFor(
  ctx: GpuContext,
  template: Template | undefined,
  offerId: string | undefined,
  diskGb: number,
  { kind = "on-demand", markets }: { kind?: RentalKind; markets?: readonly string[] } = {},
): Promise<MarketOffer[]> {
  const filter = candidateFilter(template, offerId, diskGb);
  if (!filter) return [];
  try {
    const narrowed = markets && markets.length > 0 && offerId === undefined ? { ...filter, markets } : filter;
    return await ctx.marketplace.searchOffers(kind === "bid" ? { ...narrowed, interruptible: true } : narrowed);
  } catch (err) {
    throw asMarketplaceError(err, "The marketplace did not search its offers");
  }
}

/**
 * Completes the record with what the marketplace rented, and writes the creation log record. If
 * that cannot be done (the rented price breaks the endpoint's budget, the template's cap or the
 * fleet cap, the database refuses the write, the record was settled elsewhere), the machine is
 * destroyed and the record ends failed.
 */
async function completeOrRelease(
  ctx: GpuContext,
  actor: string,
  record: InstanceRecord,
  market: MarketInstance,
  caps: { template: Template | undefined; budget: ReplicaBudget | undefined },
  started: number,
): Promise<void> {
  try {
    // The caps hold for the price actually rented, not only the price the offer showed (billed-rate.ts):
    // an endpoint's budget first, the one its replica was chosen under, then the template's, then the fleet's.
    if (caps.budget) checkBudget(record, market.dphTotal, caps.budget);
    if (caps.template) checkTemplateLimits({ id: market.offerId, gpuRam: market.gpuRam }, caps.template, market.dphTotal);
    await checkFleetCap(ctx, record, market.dphTotal, ctx.maxFleetDph);
    if (await completeCreation(ctx, actor, record, market, "creating", started)) return;
    // Someone else settled the record meanwhile (another replica's reconciler). Adopted with this
    // very machine is a success; adopted with a twin of this machine (a lost create's, listed
    // late), the record's machine is kept and this one given back; anything else means the
    // machine is not ours to report.
    const current = await ctx.instances.get(record.instanceId);
    if (current && machineRefOf(current) === market.id) return;
    if (current && current.marketInstanceId !== null && !isTerminal(current.status)) return await releaseTwin(ctx, actor, current, market);
    throw new OperationFailedError(`The creation of '${record.instanceId}' was settled elsewhere as ${current?.status ?? "missing"}`);
  } catch (err) {
    const reason = err instanceof DomainError ? err.message : "the record could not be completed";
    ctx.logger.error({ err, instance_id: record.instanceId }, "creation not completed; destroying the rented machine");
    await releaseMachine(ctx, actor, record, market, reason, started);
    throw err;
  }
}

function messageOf(instanceId: string, template: Template | undefined, market: MarketInstance): string {
  const bid = market.interruptible && market.bidPerHour !== undefined ? ` (an interruptible bid of $${market.bidPerHour}/h)` : "";
  const what = `${market.numGpus}x ${market.gpuName} at $${market.dphTotal}/h${bid}`;
  return template
    ? `Instance ${instanceId} is being created from template '${template.name}' (${template.config?.llmModelName}) on ${what}`
    : `Instance ${instanceId} is being created without a template (no model server) on ${what}`;
}
