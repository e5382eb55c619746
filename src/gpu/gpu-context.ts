import type { Knex } from "knex";
import type { Logger } from "pino";
import type { Deployment } from "./deployment.js";
import type { ExecutionLogStore } from "./store/execution-log-store.js";
import type { InstanceStore, MarketFacts } from "./store/instance-store.js";
import type { Marketplace, MarketInstance } from "./marketplace/port.js";
import { ownInstanceId } from "./marketplace/markets/market-ids.js";
import type { ModelServerProbe } from "./lifecycle/probe.js";

/** What the GPU service's parts share; built once by gpu-module.ts. */
export interface GpuContext {
  knex: Knex;
  logger: Logger;
  instances: InstanceStore;
  logs: ExecutionLogStore;
  marketplace: Marketplace;
  /** This deployment's label scheme; resolved from the database on first use. */
  deployment(): Promise<Deployment>;
  probe: ModelServerProbe;
  /** instance_ids whose creation is running in this process: the reconciler leaves them alone. */
  inFlight: Set<string>;
  /** GPU_MAX_FLEET_DPH: cap on the summed cost_per_hour of active instances; undefined: none. */
  maxFleetDph: number | undefined;
  /**
   * GPU_CREATION_GRACE_MS: how long a creating record waits for the marketplace to show its
   * instance (vast.ai lags by seconds) before its absence means the machine is gone; default 5 min.
   */
  creationGraceMs?: number;
}

export const DEFAULT_CREATION_GRACE_MS = 300_000;

export function marketFactsOf(market: MarketInstance): MarketFacts {
  return {
    marketInstanceId: ownInstanceId(market),
    ...(market.market !== undefined && { market: market.market }),
    gpuInfo: { gpuName: market.gpuName, numGpus: market.numGpus, gpuRam: market.gpuRam },
    costPerHour: market.dphTotal,
    publicIp: market.publicIp || null,
    sshPort: market.sshPort || null,
    portMappings: market.portMappings,
  };
}

export function elapsedSince(started: number): number {
  return Date.now() - started;
}
