import type { JsonObject } from "@bufbuild/protobuf";
import type { Template } from "../../gen/gpu/v1/gpu_service_pb.js";
import { DomainError, excerpt, InvalidInputError, OperationFailedError, UnavailableError } from "../errors.js";
import { parseCustomConfig } from "./custom-config.js";
import { destroyRecord } from "./destroy.js";
import { elapsedSince, marketFactsOf, type GpuContext } from "./gpu-context.js";
import { gpuInfoJson, type InstanceRecord } from "./instance-store.js";
import { launchPlanOf, type LaunchPlan } from "./launch-plan.js";
import type { MarketInstance, MarketOffer } from "./marketplace/marketplace.js";
import { checkTemplateLimits, chooseOffer } from "./offer-choice.js";
import { findTemplate } from "./templates.js";

// Crash-safe creation: the record (its instance_id is the label the marketplace instance
// carries) is written before the marketplace call and completed after it. A crash in between
// leaves a creating record and a labelled marketplace instance, which the reconciler adopts.

export interface CreationHooks {
  /** Runs between the marketplace call and the database update; a throw here stands for a crash at that point. */
  afterMarketplaceCreate?(instanceId: string): void | Promise<void>;
}

export interface CreationRequest {
  templateName?: string;
  offerId?: string;
  customConfig?: JsonObject;
}

export interface CreationResult {
  instanceId: string;
  templateName: string;
  message: string;
}

export async function createInstance(ctx: GpuContext, request: CreationRequest, hooks: CreationHooks = {}): Promise<CreationResult> {
  const template = templateOf(request.templateName);
  const plan = launchPlanOf(template, parseCustomConfig(request.customConfig, template !== undefined));
  const offer = chooseOffer(await catalogue(ctx), template, request.offerId || undefined);
  const instanceId = await ctx.instances.nextInstanceId();
  ctx.inFlight.add(instanceId);
  try {
    const started = Date.now();
    const record = await ctx.instances.insertCreating({
      instanceId,
      offerId: offer.id,
      imageName: plan.image,
      gpuInfo: { gpuName: offer.gpuName, numGpus: offer.numGpus, gpuRam: offer.gpuRam },
      costPerHour: offer.dphTotal,
      templateName: template?.name ?? null,
      startCommand: plan.startCommand,
      autoDestroy: plan.autoDestroy,
    });
    const market = await rent(ctx, record, plan, started);
    await hooks.afterMarketplaceCreate?.(instanceId);
    await complete(ctx, record, market, template, started);
    return { instanceId, templateName: template?.name ?? "", message: messageOf(instanceId, template, offer, market) };
  } finally {
    ctx.inFlight.delete(instanceId);
  }
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

async function catalogue(ctx: GpuContext): Promise<MarketOffer[]> {
  try {
    return await ctx.marketplace.listOffers();
  } catch (err) {
    throw asMarketplaceError(err, "The marketplace did not list its offers");
  }
}

/** Rents the offer; on failure marks the record failed with one success=false log record. */
async function rent(ctx: GpuContext, record: InstanceRecord, plan: LaunchPlan, started: number): Promise<MarketInstance> {
  try {
    return await ctx.marketplace.createInstance({
      offerId: record.offerId,
      label: record.instanceId,
      image: plan.image,
      startCommand: plan.startCommand,
      env: plan.env,
      ...(plan.llmPort !== undefined ? { llmPort: plan.llmPort, llmModelName: plan.llmModelName } : {}),
    });
  } catch (err) {
    const error = asMarketplaceError(err, "The marketplace did not create the instance");
    await failCreation(ctx, record, error.message, started);
    throw error;
  }
}

/** Completes the record with what the marketplace rented, and writes the creation log record. */
async function complete(
  ctx: GpuContext,
  record: InstanceRecord,
  market: MarketInstance,
  template: Template | undefined,
  started: number,
): Promise<void> {
  const completed = await ctx.knex.transaction(async (trx) => {
    const updated = await ctx.instances.completeCreation(record.instanceId, marketFactsOf(market), trx);
    if (updated) await ctx.logs.append(creationLog(updated, market, "creating", elapsedSince(started)), trx);
    return updated;
  });
  if (!completed) {
    // Someone else settled the record meanwhile (another replica's reconciler). Adopted with this
    // very machine is a success; anything else means the machine is not ours to report.
    const current = await ctx.instances.get(record.instanceId);
    if (current?.marketInstanceId === market.id) return;
    throw new OperationFailedError(`The creation of '${record.instanceId}' was settled elsewhere as ${current?.status ?? "missing"}`);
  }
  if (!template) return;
  // The cap holds for the price actually rented, not only the price the offer showed.
  try {
    checkTemplateLimits({ id: market.offerId, gpuRam: market.gpuRam }, template, market.dphTotal);
  } catch (err) {
    await destroyRecord(ctx, completed, "destroy_instance").catch((e: unknown) => ctx.logger.warn({ err: e }, "destroy retried later"));
    throw err;
  }
}

export function creationLog(record: InstanceRecord, market: MarketInstance, result: string, executionTime: number) {
  return {
    instanceId: record.instanceId,
    operation: "create_instance" as const,
    command: `create ${record.offerId} label=${record.instanceId} image=${record.imageName}`,
    result,
    executionTime,
    success: true,
    metadata: {
      template_name: record.templateName,
      gpu_info: gpuInfoJson(record.gpuInfo),
      cost_per_hour: record.costPerHour,
      offer_id: record.offerId,
      market_instance_id: market.id,
      auto_destroy: record.autoDestroy,
    },
  };
}

/** Marks a creating record failed and writes its one success=false creation log record. */
export async function failCreation(ctx: GpuContext, record: InstanceRecord, reason: string, started: number): Promise<void> {
  await ctx.knex.transaction(async (trx) => {
    const failed = await ctx.instances.changeStatus(record.instanceId, "creating", "failed", undefined, trx);
    if (!failed) return;
    await ctx.logs.append(
      {
        instanceId: record.instanceId,
        operation: "create_instance",
        command: `create ${record.offerId} label=${record.instanceId} image=${record.imageName}`,
        result: reason,
        executionTime: elapsedSince(started),
        success: false,
        metadata: { template_name: record.templateName, gpu_info: gpuInfoJson(record.gpuInfo), cost_per_hour: record.costPerHour, offer_id: record.offerId },
      },
      trx,
    );
  });
}

function asMarketplaceError(err: unknown, message: string): DomainError {
  if (err instanceof DomainError) return err;
  return new UnavailableError(message, { cause: err });
}

function messageOf(instanceId: string, template: Template | undefined, offer: MarketOffer, market: MarketInstance): string {
  const what = `${market.numGpus || offer.numGpus}x ${market.gpuName || offer.gpuName} at $${market.dphTotal}/h`;
  return template
    ? `Instance ${instanceId} is being created from template '${template.name}' (${template.config?.llmModelName}) on ${what}`
    : `Instance ${instanceId} is being created without a template (no model server) on ${what}`;
}
