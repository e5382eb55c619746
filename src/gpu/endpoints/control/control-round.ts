import type { EndpointConfig } from "../../../config.js";
import type { GpuContext } from "../../gpu-context.js";
import type { EndpointEventStore, EventKind } from "../resource/endpoint-events.js";
import type { EndpointRecord, EndpointStore } from "../resource/endpoint-store.js";
import type { ReadinessProbe } from "../replicas/readiness-probe.js";
import { billedCost, type ReplicaFacts } from "../replicas/replica-state.js";
import type { LoadStore } from "../load/load-store.js";
import type { PlanSettings } from "./endpoint-plan.js";
import type { MarketBackoff } from "./market-backoff.js";

// What the controller's parts share: their dependencies, and one round of decisions for one
// endpoint (what it has done so far: the spend its launches count against, whether launches may
// go on). Every action that spends or destroys asks `confirmLead` first.

export interface EndpointControllerDeps {
  ctx: GpuContext;
  endpoints: EndpointStore;
  events: EndpointEventStore;
  probe: ReadinessProbe;
  settings: EndpointConfig & Pick<PlanSettings, "missingGraceMs">;
  /**
   * The sync leadership: `term()` names the lease a round starts on, and `confirm(term)` says
   * whether this process still leads on that very lease (a lead lost and taken again since is
   * not the round's); absent: this process always leads.
   */
  leader?: { confirm(term?: number): Promise<boolean>; term(): number };
  /** The load every proxy publishes, for the autoscaler and for scale-in; absent: no load known. */
  load?: Pick<LoadStore, "readLoad">;
  /** Counts requests still in flight on a replica whose drain ended (they are cut). */
  onDrainCut?(endpoint: string, requests: number): void;
}

/** The deps of one round: the lead confirmed on the lease the round started on. */
export interface RoundDeps extends EndpointControllerDeps {
  confirmLead(): Promise<boolean>;
  /** Each market's own backoff, kept by the controller across rounds (market-backoff.ts). */
  marketBackoff?: MarketBackoff;
}

/** The round stops here: this process lost the lead. */
export class LeadLost extends Error {}

export interface Round {
  byId: Map<string, ReplicaFacts>;
  /** The billed cost_per_hour of a replica as the round started (0 once its machine is over). */
  costOf(instanceId: string): number;
  spend: number;
  blocked: boolean;
  launched: boolean;
  /** Why a replica is held back by the budget this round. */
  held: string | undefined;
  /** A preempted replica was removed: its replacement goes at once, whatever the backoff. */
  urgent: boolean;
  /** The machines the endpoint's billed replicas run on. */
  machineIds: string[];
  /** The markets the endpoint's replicas are rented on, one entry each (capacity.spread_markets). */
  replicaMarkets: string[];
}

export function newRound(facts: readonly ReplicaFacts[]): Round {
  const byId = new Map(facts.map((f) => [f.row.instanceId, f]));
  const costOf = (id: string) => {
    const f = byId.get(id);
    return f ? billedCost(f) : 0;
  };
  const machineIds = facts.flatMap((f) => (f.record?.machineId && billedCost(f) > 0 ? [f.record.machineId] : []));
  // Every replica with a record, even one still being created: a spread counts where it will run.
  const replicaMarkets = facts.flatMap((f) => (f.record?.market ? [f.record.market] : []));
  const spend = facts.reduce((sum, f) => sum + billedCost(f), 0);
  return { byId, costOf, spend, blocked: false, launched: false, held: undefined, urgent: false, machineIds, replicaMarkets };
}

export function note(deps: Pick<EndpointControllerDeps, "events">, endpoint: EndpointRecord, kind: EventKind, detail: string, instanceId?: string) {
  return deps.events.append({ endpointId: endpoint.id, kind, detail, instanceId: instanceId ?? null });
}
