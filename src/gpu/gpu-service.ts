import type { ServiceImpl } from "@connectrpc/connect";
import { actorOf } from "../actor.js";
import type { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { excerpt, InvalidInputError, NotFoundError } from "../errors.js";
import { createInstance, type CreationHooks, type CreationResult } from "./creation/creation.js";
import { destroyRecord } from "./lifecycle/destroy.js";
import type { GpuContext } from "./gpu-context.js";
import { basicStatus, costAnalysis, enhancedStatus, listInstances, requireRecord } from "./instance-reads.js";
import { listMarkets, searchMarkets } from "./market-reads.js";
import { logMessage, offerMessage } from "./messages.js";
import { DEFAULT_LIMIT, validateLimit } from "./marketplace/offers.js";
import type { StatisticsStore } from "./store/statistics-store.js";
import { findTemplate, listTemplates } from "./creation/templates.js";
import { roundMoney } from "./money/cost.js";
import type { EndpointEventStore } from "./endpoints/resource/endpoint-events.js";
import { createEndpointRpcs } from "./endpoints/resource/endpoint-service.js";
import type { EndpointStore } from "./endpoints/resource/endpoint-store.js";
import { createHistoryRpcs, type HistoryRpcsOptions } from "./history/history-rpcs.js";
import { createKeyRpcs, type KeyRpcsOptions } from "./keys/key-rpcs.js";

export interface GpuServiceOptions {
  ctx: GpuContext;
  statistics: StatisticsStore;
  endpoints: EndpointStore;
  events: EndpointEventStore;
  /** The endpoints' history and the fleet's spend over time. */
  history: Omit<HistoryRpcsOptions, "endpoints">;
  /** The keys for callers of the endpoints and their usage. */
  keys: Omit<KeyRpcsOptions, "endpoints">;
  /** Test seam: see CreationHooks. */
  creationHooks?: CreationHooks;
}

/** Every GpuService RPC; each one is a thin call into the module that does its job. */
export function createGpuService(options: GpuServiceOptions): ServiceImpl<typeof GpuService> {
  const { ctx, statistics, creationHooks } = options;
  const endpointRpcs = createEndpointRpcs({ ctx, endpoints: options.endpoints, events: options.events, actorOf });
  const historyRpcs = createHistoryRpcs({ ...options.history, endpoints: options.endpoints });
  const keyRpcs = createKeyRpcs({ ...options.keys, endpoints: options.endpoints });
  return {
    async listOffers(req) {
      const found = await searchMarkets(ctx, { ...req, limit: MAX_OFFERS });
      return { offers: found.offers.map(offerMessage), total: found.total, filteredCount: found.filteredCount, markets: found.markets };
    },
    async searchOffers(req) {
      const found = await searchMarkets(ctx, req);
      return {
        offers: found.offers.map(offerMessage),
        total: found.total,
        filteredCount: found.filteredCount,
        sortInfo: { sortBy: found.sortBy, order: found.order },
        markets: found.markets,
      };
    },
    listMarkets: () => listMarkets(ctx),
    listTemplates() {
      return { templates: [...listTemplates()] };
    },
    getTemplate({ templateName }) {
      const template = findTemplate(templateName);
      if (!template) throw new NotFoundError(`Template '${excerpt(templateName)}' not found`);
      return template;
    },
    async createInstanceFromTemplate(req, context) {
      const created = await createInstance(
        ctx,
        { templateName: req.templateName || missingTemplate(), offerId: req.offerId, customConfig: req.body?.customConfig, actor: actorOf(context) },
        creationHooks,
      );
      return creationResponse(created);
    },
    async createInstance(req, context) {
      return creationResponse(await createInstance(ctx, { ...req, actor: actorOf(context) }, creationHooks));
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
    async destroyInstance({ instanceId }, context) {
      const record = await requireRecord(ctx, instanceId);
      const wasDestroyed = record.status === "destroyed";
      await destroyRecord(ctx, actorOf(context), record, "destroy_instance");
      const message = wasDestroyed ? `Instance ${instanceId} was already destroyed` : `Instance ${instanceId} destroyed`;
      return { success: true, instanceId, status: "destroyed", message };
    },
    async getModelKey({ instanceId }) {
      const record = await requireRecord(ctx, instanceId);
      if (record.modelApiKey === null) {
        const why = record.templateName === null ? "it runs no model server" : "it was created before model-server keys, and its model server takes none";
        throw new NotFoundError(`Instance '${instanceId}' has no model-server key: ${why}`, { extra: { code: "NO_MODEL_KEY" } });
      }
      return { instanceId, modelApiKey: record.modelApiKey };
    },
    async getStatistics() {
      const stats = await statistics.statistics();
      return { ...stats, totalCost: roundMoney(stats.totalCost), averageCostPerHour: roundMoney(stats.averageCostPerHour) };
    },
    ...endpointRpcs,
    ...historyRpcs,
    ...keyRpcs,
  };
}

/** The catalogue is a few hundred offers: the simple search returns every match. */
const MAX_OFFERS = 1000;

function creationResponse(created: CreationResult) {
  const { modelApiKey, ...rest } = created;
  return { success: true, ...rest, status: "creating", ...(modelApiKey !== null ? { modelApiKey } : {}) };
}

function missingTemplate(): never {
  throw new InvalidInputError("template_name is required", { extra: { field: "template_name" } });
}
