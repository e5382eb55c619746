import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import type { ModuleDeps, ServiceModule } from "../module.js";
import { registration } from "../server/service-registration.js";
import { resolveDeployment, type Deployment } from "./deployment.js";
import { ExecutionLogStore } from "./store/execution-log-store.js";
import type { GpuContext } from "./gpu-context.js";
import { registerGpuMetrics } from "./gpu-metrics.js";
import { createGpuService } from "./gpu-service.js";
import { InstanceStore } from "./store/instance-store.js";
import { withStatusCache } from "./marketplace/status-cache.js";
import { createModelServerProbe } from "./lifecycle/probe.js";
import { StatisticsStore } from "./store/statistics-store.js";
import { createSyncLeader } from "./lifecycle/sync-leader.js";
import { createSyncLoop, type SyncLoop } from "./lifecycle/sync-loop.js";

export interface GpuModule extends ServiceModule {
  /** The status sync and reconciliation loop; tests run rounds on demand. */
  syncLoop: SyncLoop;
}

/** GpuService with its background work: the status sync loop, which also reconciles. */
export function createGpuModule(deps: ModuleDeps): GpuModule {
  const { config, knex, logger } = deps;
  const { statusCacheMs } = config.gpu;
  const marketplace = statusCacheMs > 0 ? withStatusCache(deps.marketplace, statusCacheMs) : deps.marketplace;
  let deployment: Promise<Deployment> | undefined;
  const ctx: GpuContext = {
    knex,
    logger: logger.child({ service: "gpu" }),
    instances: InstanceStore.create({ knex }),
    logs: ExecutionLogStore.create({ knex }),
    marketplace,
    deployment() {
      // Resolved once; a failure (database down) is retried on the next use.
      deployment ??= resolveDeployment(knex, config.gpu.deploymentId).catch((err: unknown) => {
        deployment = undefined;
        throw err;
      });
      return deployment;
    },
    probe: createModelServerProbe(config.gpu.probeTimeoutMs),
    inFlight: new Set(),
    maxFleetDph: config.gpu.maxFleetDph,
    creationGraceMs: config.gpu.creationGraceMs,
  };
  const syncLoop = createSyncLoop(ctx, {
    intervalMs: config.gpu.statusSyncMs,
    creationGraceMs: config.gpu.creationGraceMs,
    leader: createSyncLeader(knex, ctx.logger),
  });
  const statistics = StatisticsStore.create({ knex });
  registerGpuMetrics(deps.metrics.registry, statistics);
  const service = createGpuService({ ctx, statistics, creationHooks: deps.gpuCreationHooks });
  return {
    service: registration(GpuService, service),
    syncLoop,
    start: () => syncLoop.start(),
    stop: () => syncLoop.stop(),
  };
}
