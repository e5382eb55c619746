import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import type { EndpointDirectory, ModuleDeps, ServiceModule } from "../module.js";
import { registration } from "../server/service-registration.js";
import { resolveDeployment, type Deployment } from "./deployment.js";
import { createEndpointController } from "./endpoints/control/endpoint-controller.js";
import { createEndpointDirectory } from "./endpoints/resource/endpoint-directory.js";
import { EndpointEventStore } from "./endpoints/resource/endpoint-events.js";
import { createEndpointLoop, type EndpointLoop } from "./endpoints/control/endpoint-loop.js";
import { registerEndpointMetrics } from "./endpoints/resource/endpoint-metrics.js";
import { EndpointStore } from "./endpoints/resource/endpoint-store.js";
import { createLoadPublisher } from "./endpoints/load/load-publisher.js";
import { registerLoadMetrics } from "./endpoints/load/load-metrics.js";
import { LoadStore } from "./endpoints/load/load-store.js";
import { KnexTrafficStore } from "./endpoints/load/traffic-store.js";
import { createHistorySampler } from "./history/history-sampler.js";
import { KnexHistoryStore } from "./history/history-store.js";
import { KnexSpendStore } from "./history/spend-store.js";
import { createReadinessProbe } from "./endpoints/replicas/readiness-probe.js";
import { ExecutionLogStore } from "./store/execution-log-store.js";
import type { GpuContext } from "./gpu-context.js";
import { registerGpuMetrics, registerLeadershipMetrics, registerMarketMetrics } from "./gpu-metrics.js";
import { createGpuService } from "./gpu-service.js";
import { InstanceStore } from "./store/instance-store.js";
import { withStatusCache } from "./marketplace/status-cache.js";
import { createModelServerProbe } from "./lifecycle/probe.js";
import { StatisticsStore } from "./store/statistics-store.js";
import { createSyncLeader, leadershipJson } from "./lifecycle/sync-leader.js";
import { createSyncLoop, type SyncLoop } from "./lifecycle/sync-loop.js";
import { KnexKeyStore } from "../server/keys/key-store.js";
import { KnexKeyUsageStore } from "../server/keys/key-usage-store.js";
import { nameMarketOfOldRecords } from "./lifecycle/market-listing.js";

export interface GpuModule extends ServiceModule {
  /** The status sync and reconciliation loop; tests run rounds on demand. */
  syncLoop: SyncLoop;
  /** The endpoint controller's loop (probes and replica decisions); tests run rounds on demand. */
  endpointLoop: EndpointLoop;
  /** Where the proxy finds an endpoint's ready replicas, from the database. */
  endpoints: EndpointDirectory;
  /** Whether this process leads the control loops and when a round last ran: a /readyz detail. */
  leadership(): ReturnType<typeof leadershipJson>;
}

/** How long a replica row waits for its instance record before its launch counts as lost, ms. */
const REPLICA_RECORD_GRACE_MS = 60_000;

/** GpuService with its background work: the status sync loop (which also reconciles) and the endpoint controller. */
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
  const leader = createSyncLeader(knex, ctx.logger);
  const syncLoop = createSyncLoop(ctx, {
    intervalMs: config.gpu.statusSyncMs,
    creationGraceMs: config.gpu.creationGraceMs,
    leader,
  });
  const endpoints = EndpointStore.create({ knex });
  const events = EndpointEventStore.create({ knex });
  // Every process publishes its proxy's load, leader or not; the controller on the leader sums it.
  const load = LoadStore.create({ knex });
  const controlMetrics = registerEndpointMetrics(deps.metrics.registry, { ctx, endpoints });
  // And its answers per minute, which the leader samples into the endpoints' history.
  const traffic = KnexTrafficStore.create({ knex });
  const { historyDays, apiReadTimeoutMs: readTimeoutMs } = config.gpu;
  const history = KnexHistoryStore.create({ knex, readTimeoutMs });
  // What keys used, per minute: read by the usage RPC, pruned with the history.
  const keyUsage = KnexKeyUsageStore.create({ knex, readTimeoutMs });
  const endpointLoop = createEndpointLoop({
    controller: createEndpointController({
      ctx,
      endpoints,
      events,
      probe: createReadinessProbe(config.gpu.probeTimeoutMs),
      settings: { ...config.gpu.endpoints, missingGraceMs: REPLICA_RECORD_GRACE_MS },
      leader,
      load,
      onDrainCut: controlMetrics.drainCut,
    }),
    intervalMs: config.gpu.endpoints.probeMs,
    leader,
    logger: ctx.logger,
    history: createHistorySampler({ ctx, endpoints, load, traffic, history, keyUsage, historyDays, logger: ctx.logger }),
  });
  const loadPublisher = createLoadPublisher({
    store: load,
    load: deps.proxyLoad,
    traffic: { source: deps.proxyTraffic, store: traffic },
    usage: { source: deps.keyUsage, store: keyUsage },
    logger: ctx.logger,
  });
  const statistics = StatisticsStore.create({ knex });
  registerGpuMetrics(deps.metrics.registry, statistics);
  registerMarketMetrics(deps.metrics.registry, marketplace);
  registerLeadershipMetrics(deps.metrics.registry, leader);
  registerLoadMetrics(deps.metrics.registry, { endpoints, load });
  const service = createGpuService({
    ctx,
    statistics,
    endpoints,
    events,
    history: { history, spend: KnexSpendStore.create({ knex, readTimeoutMs }), historyDays },
    keys: { keys: KnexKeyStore.create({ knex }), usage: keyUsage, inFlight: load },
    creationHooks: deps.gpuCreationHooks,
  });
  return {
    service: registration(GpuService, service),
    syncLoop,
    endpointLoop,
    endpoints: createEndpointDirectory({ ctx, endpoints, logger: ctx.logger }),
    leadership: () => leadershipJson(leader.status()),
    async start() {
      loadPublisher.start();
      await nameMarketOfOldRecords(ctx);
      await syncLoop.start();
      endpointLoop.start();
    },
    async stop() {
      await endpointLoop.stop();
      await syncLoop.stop();
      await loadPublisher.stop();
    },
  };
}
