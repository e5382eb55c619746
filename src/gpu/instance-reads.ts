import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  CostAnalysisSchema,
  GetInstanceEnhancedResponseSchema,
  GetInstanceResponseSchema,
  ListInstancesResponseSchema,
} from "../../gen/gpu/v1/gpu_service_pb.js";
import { excerpt, InvalidInputError, NotFoundError } from "../errors.js";
import { costFigures, formatUptime, uptimeMs } from "./money/cost.js";
import type { GpuContext } from "./gpu-context.js";
import { SORT_SQL } from "./store/instance-list-sql.js";
import { INSTANCE_ID_PREFIX, type InstanceRecord } from "./store/instance-store.js";
import { limitsView } from "./money/limits.js";
import { bidFields, instanceMessage } from "./messages.js";
import { DEFAULT_LIMIT, validateLimit } from "./marketplace/offers.js";
import { decodePageToken, encodePageToken, INSTANCE_SORT_KEYS, type InstanceSortKey } from "./store/page-token.js";
import { modelServerPort } from "./lifecycle/probe.js";
import { syncRecord } from "./lifecycle/status-sync.js";
import { isStoredStatus, shownMarketStatus, STORED_STATUSES } from "./store/status.js";
import type { MarketStatus } from "./marketplace/port.js";

// The instance read RPCs. Status reads sync first (the marketplace is the truth); the list, the
// cost analysis and the logs read the database only.

const INSTANCE_ID_FORMAT = new RegExp(`^${INSTANCE_ID_PREFIX}\\d{1,18}$`);

export async function requireRecord(ctx: GpuContext, instanceId: string): Promise<InstanceRecord> {
  // Ids are a prefix and digits: anything else cannot exist, and is not worth a query.
  const record = INSTANCE_ID_FORMAT.test(instanceId) ? await ctx.instances.get(instanceId) : undefined;
  if (!record) throw new NotFoundError(`Instance '${excerpt(instanceId)}' not found`, { extra: { field: "instance_id" } });
  return record;
}

export async function basicStatus(ctx: GpuContext, instanceId: string): Promise<MessageInitShape<typeof GetInstanceResponseSchema>> {
  const { record, market } = await syncRecord(ctx, await requireRecord(ctx, instanceId));
  const source = market ?? { status: record.status, publicIp: record.publicIp ?? "", sshPort: record.sshPort ?? 0, portMappings: record.portMappings, ...record.gpuInfo, dphTotal: record.costPerHour };
  return {
    success: true,
    data: {
      instanceId,
      status: shownMarketStatus(source.status as MarketStatus),
      publicIp: source.publicIp,
      sshPort: source.sshPort,
      portMappings: source.portMappings,
      gpuName: source.gpuName,
      numGpus: source.numGpus,
      gpuRam: source.gpuRam,
      costPerHour: source.dphTotal,
      interruptible: record.interruptible,
      bidPerHour: record.bidPerHour ?? undefined,
      preempted: market ? market.status === "preempted" : record.preemptedAt !== null && record.status === "exited",
      market: record.market ?? "",
    },
  };
}

export async function enhancedStatus(ctx: GpuContext, instanceId: string): Promise<MessageInitShape<typeof GetInstanceEnhancedResponseSchema>> {
  const { record, market, llmAnswered } = await syncRecord(ctx, await requireRecord(ctx, instanceId));
  const portMappings = market?.portMappings ?? record.portMappings;
  const now = new Date();
  return {
    success: true,
    data: {
      instanceId,
      basicStatus: { status: market ? shownMarketStatus(market.status) : record.status, publicIp: market?.publicIp ?? record.publicIp ?? "" },
      llmStatus: { running: llmAnswered, port: record.templateName ? modelServerPort(portMappings) : 0 },
      dbInfo: {
        status: record.status,
        costPerHour: record.costPerHour,
        gpuInfo: record.gpuInfo,
        uptime: formatUptime(uptimeMs(record.createdAt, record.destroyedAt, now)),
        ...bidFields(record),
      },
      limits: limitsView(record, now),
    },
  };
}

export async function costAnalysis(ctx: GpuContext, instanceId: string): Promise<MessageInitShape<typeof CostAnalysisSchema>> {
  const record = await requireRecord(ctx, instanceId);
  const now = new Date();
  const figures = costFigures(record.costPerHour, uptimeMs(record.createdAt, record.destroyedAt, now));
  return {
    instanceId,
    costPerHour: figures.costPerHour,
    totalCost: figures.totalCost,
    uptimeHours: figures.uptimeHours,
    costBreakdown: {
      hourlyRate: figures.hourlyRate,
      uptimeDays: figures.uptimeDays,
      estimatedDailyCost: figures.estimatedDailyCost,
      estimatedMonthlyCost: figures.estimatedMonthlyCost,
    },
    limits: limitsView(record, now),
    costIncludes: ctx.marketplace.costIncludes ?? DEFAULT_COST_INCLUDES,
  };
}

const DEFAULT_COST_INCLUDES = "the marketplace's price per hour for the whole machine (dph_total), over the uptime";

export interface ListQuery {
  statusFilter?: string;
  sortBy?: string;
  limit?: number;
  pageToken?: string;
}

export async function listInstances(ctx: GpuContext, query: ListQuery): Promise<MessageInitShape<typeof ListInstancesResponseSchema>> {
  const statusFilter = query.statusFilter || undefined;
  if (statusFilter !== undefined && !isStoredStatus(statusFilter)) {
    throw new InvalidInputError(`status_filter must be one of ${STORED_STATUSES.join(", ")}, got '${statusFilter}'`, {
      extra: { field: "status_filter" },
    });
  }
  const sortBy = (query.sortBy || "created_at") as InstanceSortKey;
  if (!INSTANCE_SORT_KEYS.includes(sortBy)) {
    throw new InvalidInputError(`sort_by must be one of ${INSTANCE_SORT_KEYS.join(", ")}, got '${sortBy}'`, { extra: { field: "sort_by" } });
  }
  validateLimit(query.limit);
  const token = query.pageToken ? decodePageToken(query.pageToken, sortBy, statusFilter ?? "") : undefined;
  if (token && !SORT_SQL[sortBy].isValidKey(token.after[0])) {
    throw new InvalidInputError("page_token is not a token this service issued", { extra: { field: "page_token" } });
  }
  const asOf = token?.asOf ?? new Date().toISOString();
  const [page, count] = await Promise.all([
    ctx.instances.listPage({ statusFilter, sortBy, limit: query.limit ?? DEFAULT_LIMIT, asOf, after: token?.after }),
    ctx.instances.count(statusFilter),
  ]);
  const now = new Date();
  return {
    instances: page.records.map((r) => instanceMessage(r, now)),
    count,
    nextPageToken: page.nextAfter ? encodePageToken({ sortBy, statusFilter: statusFilter ?? "", asOf, after: page.nextAfter }) : "",
  };
}
