import type { ServiceImpl } from "@connectrpc/connect";
import type { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { DomainError, excerpt, InvalidInputError, NotFoundError, UnavailableError } from "../errors.js";
import { createInstance, type CreationHooks } from "./creation/creation.js";
import { destroyRecord } from "./lifecycle/destroy.js";
import type { GpuContext } from "./gpu-context.js";
import { basicStatus, costAnalysis, enhancedStatus, listInstances, requireRecord } from "./instance-reads.js";
import type { MarketOffer } from "./marketplace/port.js";
import { logMessage, offerMessage } from "./messages.js";
import { DEFAULT_LIMIT, searchOffers, validateLimit } from "./marketplace/offers.js";
import type { StatisticsStore } from "./store/statistics-store.js";
import { findTemplate, listTemplates } from "./creation/templates.js";
import { roundMoney } from "./money/cost.js";

export interface GpuServiceOptions {
  ctx: GpuContext;
  statistics: StatisticsStore;
  /** Test seam: see CreationHooks. */
  creationHooks?: CreationHooks;
}

/** Every GpuService RPC; each one is a thin call into the module that does its job. */
export function createGpuService(options: GpuServiceOptions): ServiceImpl<typeof GpuService> {
  const { ctx, statistics, creationHooks } = options;
  const catalogue = async (): Promise<MarketOffer[]> => {
    try {
      return await ctx.marketplace.listOffers();
    } catch (err) {
      // A refused key or another misconfiguration is no outage: it answers as itself (500 naming
      // the variable), not as a retryable 503.
      if (err instanceof DomainError && !(err instanceof UnavailableError)) throw err;
      throw new UnavailableError("The marketplace did not list its offers", { cause: err });
    }
  };
  return {
    async listOffers(req) {
      const found = searchOffers(await catalogue(), { ...req, limit: MAX_OFFERS });
      return { offers: found.offers.map(offerMessage), total: found.total, filteredCount: found.filteredCount };
    },
    async searchOffers(req) {
      const found = searchOffers(await catalogue(), req);
      return {
        offers: found.offers.map(offerMessage),
        total: found.total,
        filteredCount: found.filteredCount,
        sortInfo: { sortBy: found.sortBy, order: found.order },
      };
    },
    listTemplates() {
      return { templates: [...listTemplates()] };
    },
    getTemplate({ templateName }) {
      const template = findTemplate(templateName);
      if (!template) throw new NotFoundError(`Template '${excerpt(templateName)}' not found`);
      return template;
    },
    async createInstanceFromTemplate(req) {
      const created = await createInstance(
        ctx,
        { templateName: req.templateName || missingTemplate(), offerId: req.offerId, customConfig: req.body?.customConfig },
        creationHooks,
      );
      return { success: true, ...created, status: "creating" };
    },
    async createInstance(req) {
      const created = await createInstance(ctx, req, creationHooks);
      return { success: true, ...created, status: "creating" };
    },
    listInstances: (req) => listInstances(ctx, req),
    getInstance: ({ instanceId }) => basicStatus(ctx, instanceId),
    getInstanceEnhanced: ({ instanceId }) => enhancedStatus(ctx, instanceId),
    getCostAnalysis: ({ instanceId }) => costAnalysis(ctx, instanceId),
    async listInstanceLogs({ instanceId, limit }) {
      validateLimit(limit);
      await requireRecord(ctx, instanceId);
      const logs = await ctx.logs.listForInstance(instanceId, limit ?? DEFAULT_LIMIT);
      return { logs: logs.map(logMessage) };
    },
    async destroyInstance({ instanceId }) {
      const record = await requireRecord(ctx, instanceId);
      const wasDestroyed = record.status === "destroyed";
      await destroyRecord(ctx, record, "destroy_instance");
      const message = wasDestroyed ? `Instance ${instanceId} was already destroyed` : `Instance ${instanceId} destroyed`;
      return { success: true, instanceId, status: "destroyed", message };
    },
    async getStatistics() {
      const stats = await statistics.statistics();
      return { ...stats, totalCost: roundMoney(stats.totalCost), averageCostPerHour: roundMoney(stats.averageCostPerHour) };
    },
  };
}

/** The catalogue is a few hundred offers: the simple search returns every match. */
const MAX_OFFERS = 1000;

function missingTemplate(): never {
  throw new InvalidInputError("template_name is required", { extra: { field: "template_name" } });
}
