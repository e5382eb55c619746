import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { JsonObject } from "@bufbuild/protobuf";
import type { ExecutionLogSchema, InstanceSchema, OfferSchema } from "../../gen/gpu/v1/gpu_service_pb.js";
import { formatUptime, totalCost, uptimeMs } from "./money/cost.js";
import type { LogEntry } from "./store/execution-log-store.js";
import type { InstanceRecord } from "./store/instance-store.js";
import type { MarketOffer } from "./marketplace/port.js";
import { pricePerGpu } from "./marketplace/offers.js";
import { roundMoney } from "./money/cost.js";

// Domain values to response messages. Absent times stay unset, so REST JSON omits them.

export function offerMessage(offer: MarketOffer): MessageInitShape<typeof OfferSchema> {
  return {
    id: offer.id,
    gpuName: offer.gpuName,
    numGpus: offer.numGpus,
    gpuRam: offer.gpuRam,
    dphTotal: offer.dphTotal,
    rentable: offer.rentable,
    pricePerGpu: roundMoney(pricePerGpu(offer)),
    location: offer.location,
    directPortCount: offer.directPortCount,
    cudaMaxGood: offer.cudaMaxGood,
    reliability: offer.reliability,
    market: offer.market ?? "",
  };
}

export function instanceMessage(record: InstanceRecord, now: Date): MessageInitShape<typeof InstanceSchema> {
  const uptime = uptimeMs(record.createdAt, record.destroyedAt, now);
  return {
    instanceId: record.instanceId,
    offerId: record.offerId,
    imageName: record.imageName,
    status: record.status,
    gpuInfo: record.gpuInfo,
    costPerHour: record.costPerHour,
    publicIp: record.publicIp ?? "",
    sshPort: record.sshPort ?? 0,
    portMappings: record.portMappings,
    templateName: record.templateName ?? "",
    createdAt: timestampFromDate(record.createdAt),
    updatedAt: timestampFromDate(record.updatedAt),
    destroyedAt: record.destroyedAt ? timestampFromDate(record.destroyedAt) : undefined,
    startCommand: record.startCommand,
    autoDestroy: record.autoDestroy,
    uptime: formatUptime(uptime),
    totalCost: totalCost(record.costPerHour, uptime),
    endpoint: record.endpoint ?? undefined,
    ...bidFields(record),
    market: record.market ?? "",
  };
}

/** Whether the instance is a bid, its bid, and when it was preempted, as the instance messages show them. */
export function bidFields(record: InstanceRecord) {
  return {
    interruptible: record.interruptible,
    bidPerHour: record.bidPerHour ?? undefined,
    preemptedAt: record.preemptedAt ? timestampFromDate(record.preemptedAt) : undefined,
  };
}

export function logMessage(entry: LogEntry): MessageInitShape<typeof ExecutionLogSchema> {
  return {
    id: entry.id,
    instanceId: entry.instanceId,
    operation: entry.operation,
    command: entry.command,
    result: entry.result,
    executionTime: entry.executionTime,
    success: entry.success,
    metadata: entry.metadata as JsonObject,
    createdAt: timestampFromDate(entry.createdAt),
    actor: entry.actor,
  };
}
