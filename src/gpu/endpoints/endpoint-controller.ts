import { ACTOR_SYSTEM } from "../../actor.js";
import type { EndpointConfig } from "../../config.js";
import { messageOf, NotFoundError } from "../../errors.js";
import { createInstance } from "../creation/creation.js";
import { findTemplate } from "../creation/templates.js";
import type { GpuContext } from "../gpu-context.js";
import { destroyRecord } from "../lifecycle/destroy.js";
import type { InstanceRecord } from "../store/instance-store.js";
import { roundMoney } from "../money/cost.js";
import { isTerminal } from "../store/status.js";
import type { EndpointEventStore, EventKind } from "./endpoint-events.js";
import { planEndpoint, type Action, type PlanSettings } from "./endpoint-plan.js";
import type { EndpointRecord, EndpointStore } from "./endpoint-store.js";
import { probeReplicas } from "./replica-probes.js";
import { replicaFactsOf } from "./replica-facts.js";
import type { ReadinessProbe } from "./readiness-probe.js";
import type { ReplicaFacts } from "./replica-state.js";

// The endpoint controller: probes (replica-probes.ts) and decisions (the plan, endpoint-plan.ts,
// carried out here). Both run on the sync leader only, each on its own timer (endpoint-loop.ts),
// so that a launch waiting minutes for the marketplace never delays a probe. Every
// launch writes its replica row before the creation writes its record and label before the
// marketplace call, so a crash or a leader change at any point leaves a row that the next round
// counts (no duplicate) and a labelled machine the reconciler adopts or destroys (no orphan).

export interface EndpointControllerDeps {
  ctx: GpuContext;
  endpoints: EndpointStore;
  events: EndpointEventStore;
  probe: ReadinessProbe;
  settings: EndpointConfig & Pick<PlanSettings, "missingGraceMs">;
}

export interface EndpointController {
  /** Probes every replica of every endpoint not deleted, at once. */
  probeOnce(): Promise<void>;
  /** One round of decisions over every endpoint not deleted. */
  decideOnce(): Promise<void>;
}

/** Launch failures back off from 10 s, doubling, to 10 min (SPEC.md: nothing loops faster). */
export const LAUNCH_BACKOFF_MS = { first: 10_000, max: 600_000 } as const;

export function launchBackoffMs(failures: number): number {
  return Math.min(LAUNCH_BACKOFF_MS.first * 2 ** Math.max(0, failures - 1), LAUNCH_BACKOFF_MS.max);
}

/** What one round of decisions has done so far: the spend it counts launches against, and whether launches may go on. */
interface Round {
  byId: Map<string, ReplicaFacts>;
  /** The billed cost_per_hour of a replica as the round started (0 once its machine is over). */
  costOf(instanceId: string): number;
  spend: number;
  blocked: boolean;
  launched: boolean;
  /** Why a replica is held back by the budget this round. */
  held: string | undefined;
}

function newRound(facts: readonly ReplicaFacts[]): Round {
  const byId = new Map(facts.map((f) => [f.row.instanceId, f]));
  const costOf = (id: string) => {
    const record = byId.get(id)?.record;
    return record && !isTerminal(record.status) ? record.costPerHour : 0;
  };
  return { byId, costOf, spend: facts.reduce((sum, f) => sum + costOf(f.row.instanceId), 0), blocked: false, launched: false, held: undefined };
}

type LaunchOutcome = { kind: "launched"; costPerHour: number } | { kind: "held"; detail: string } | { kind: "failed" };

export function createEndpointController(deps: EndpointControllerDeps): EndpointController {
  const { ctx, endpoints, events, settings } = deps;

  const note = (endpoint: EndpointRecord, kind: EventKind, detail: string, instanceId?: string) =>
    events.append({ endpointId: endpoint.id, kind, detail, instanceId: instanceId ?? null });

  async function decide(endpoint: EndpointRecord): Promise<void> {
    if (endpoint.phase === "deleting") return finishDelete(endpoint);
    const facts = await replicaFactsOf(deps, endpoint);
    await execute(endpoint, facts, planEndpoint(endpoint, facts, new Date(), settings));
  }

  /** Destroys a replica's machine (unless it is over already) and drops the replica. */
  async function destroyReplica(record: InstanceRecord | null, instanceId: string): Promise<void> {
    if (record && !isTerminal(record.status)) await destroyRecord(ctx, ACTOR_SYSTEM, record, "destroy_instance");
    await endpoints.removeReplica(instanceId);
  }

  /** Carries a round's actions out, in order. */
  async function execute(endpoint: EndpointRecord, facts: readonly ReplicaFacts[], actions: readonly Action[]): Promise<void> {
    const round = newRound(facts);
    for (const action of actions) {
      try {
        await apply(endpoint, round, action);
      } catch (err) {
        ctx.logger.warn({ err, endpoint: endpoint.name, action: action.kind }, "endpoint action failed; retrying next round");
        // A destroy the marketplace did not confirm stops this round's launches: money first.
        round.blocked = true;
      }
    }
    // The hold is over once a launch went through, or none is wanted; a launch not tried (backoff) changes nothing.
    const wanted = actions.some((a) => a.kind === "launch");
    if (round.held && !endpoint.budgetHeld) {
      await endpoints.setControl(endpoint.id, { budgetHeld: true });
      await note(endpoint, "budget_held", round.held);
    } else if (!round.held && endpoint.budgetHeld && (round.launched || !wanted)) {
      await endpoints.setControl(endpoint.id, { budgetHeld: false });
    }
  }

  async function apply(endpoint: EndpointRecord, round: Round, action: Action): Promise<void> {
    const replica = (id: string) => round.byId.get(id)?.record ?? null;
    const scaleText = `scale down to ${endpoint.replicas}`;
    switch (action.kind) {
      case "remove": {
        const record = replica(action.instanceId);
        await destroyReplica(record, action.instanceId);
        round.spend -= round.costOf(action.instanceId);
        if (record?.status === "failed") return launchFailed(endpoint, `${action.instanceId}: ${action.reason}`, action.instanceId);
        await note(endpoint, "ended", `${action.instanceId} ended: ${action.reason}`, action.instanceId);
        if (action.neverReady) await launchFailed(endpoint, `${action.instanceId} ended before it was ready`, action.instanceId);
        return;
      }
      case "condemn":
        await endpoints.condemn(action.instanceId);
        return note(endpoint, "unhealthy", `${action.instanceId} is replaced: ${action.reason}`, action.instanceId);
      case "retire":
        return retire(endpoint, round, action.instanceId, action.reason);
      case "drain":
        await endpoints.markDraining(action.instanceId);
        return note(endpoint, "scaled", `${action.instanceId} drains for ${settings.drainMs / 1000} s (${scaleText})`, action.instanceId);
      case "drained":
        await destroyReplica(replica(action.instanceId), action.instanceId);
        return note(endpoint, "drained", `${action.instanceId} drained and destroyed`, action.instanceId);
      case "scale_in":
        await destroyReplica(replica(action.instanceId), action.instanceId);
        return note(endpoint, "scaled", `${action.instanceId} destroyed before it was ready (${scaleText})`, action.instanceId);
      case "launch": {
        if (round.blocked || round.held || (endpoint.nextLaunchAt && endpoint.nextLaunchAt.getTime() > Date.now())) return;
        const outcome = await launch(endpoint, endpoint.maxCostPerHour - round.spend);
        if (outcome.kind === "launched") {
          round.spend += outcome.costPerHour;
          round.launched = true;
        } else if (outcome.kind === "failed") {
          round.blocked = true;
        } else if (action.makeRoom) {
          // No surge fits the budget: the condemned one goes first, its replacement next round.
          await retire(endpoint, round, action.makeRoom, "no room in the budget for a replacement beside it");
          round.blocked = true;
        } else {
          round.held = outcome.detail;
        }
      }
    }
  }

  async function retire(endpoint: EndpointRecord, round: Round, instanceId: string, reason: string): Promise<void> {
    await destroyReplica(round.byId.get(instanceId)?.record ?? null, instanceId);
    round.spend -= round.costOf(instanceId);
    await note(endpoint, "replaced", `${instanceId} destroyed: ${reason}`, instanceId);
  }

  async function launch(endpoint: EndpointRecord, priceCap: number): Promise<LaunchOutcome> {
    const template = findTemplate(endpoint.templateName);
    const templateMax = template?.config?.maxPrice ?? 0;
    const budgetText = `$${roundMoney(priceCap)}/h left of its $${endpoint.maxCostPerHour}/h budget`;
    if (priceCap <= 0) return { kind: "held", detail: `one replica held back: ${budgetText}` };
    const instanceId = await ctx.instances.nextInstanceId();
    // The intent first: should this process die from here on, the next round finds the row.
    await endpoints.insertReplica(endpoint.id, instanceId);
    try {
      await createInstance(ctx, {
        templateName: endpoint.templateName,
        customConfig: endpoint.customConfig,
        actor: ACTOR_SYSTEM,
        replicaOf: { instanceId, endpoint: endpoint.name, priceCap },
      });
    } catch (err) {
      const record = await ctx.instances.get(instanceId);
      // Outcome unknown: the record stays creating and the reconciler adopts or fails it; the row stays with it.
      if (record === null) await endpoints.forgetReplica(instanceId);
      else if (record.status !== "creating") await endpoints.removeReplica(instanceId);
      if (err instanceof NotFoundError && priceCap < templateMax && record === null) {
        return { kind: "held", detail: `one replica held back: no offer fits the ${budgetText}` };
      }
      await launchFailed(endpoint, `launch of ${instanceId} failed: ${failureText(err)}`, instanceId);
      return { kind: "failed" };
    }
    const record = await ctx.instances.get(instanceId);
    const costPerHour = record?.costPerHour ?? 0;
    const machine = record ? `${record.gpuInfo.numGpus}x ${record.gpuInfo.gpuName} at $${costPerHour}/h` : "a machine";
    await note(endpoint, "launched", `${instanceId} launched on ${machine}`, instanceId);
    return { kind: "launched", costPerHour };
  }

  async function launchFailed(endpoint: EndpointRecord, detail: string, instanceId?: string): Promise<void> {
    const failures = endpoint.launchFailures + 1;
    const delay = launchBackoffMs(failures);
    const nextLaunchAt = new Date(Date.now() + delay);
    await endpoints.setControl(endpoint.id, { launchFailures: failures, nextLaunchAt });
    Object.assign(endpoint, { launchFailures: failures, nextLaunchAt });
    await note(endpoint, "launch_failed", `${detail}; next launch in ${delay / 1000} s`, instanceId);
  }

  /** Deleting: every machine destroyed, then the endpoint is deleted. */
  async function finishDelete(endpoint: EndpointRecord): Promise<void> {
    const facts = await replicaFactsOf(deps, endpoint);
    let pending = 0;
    const now = Date.now();
    for (const { row, record } of facts) {
      // A creation still under way (here, or on a leader that just lost its lock) is waited for:
      // destroying only once it has a machine or has failed leaves no machine behind.
      const launching = record === null ? now - row.createdAt.getTime() < settings.missingGraceMs : record.status === "creating" && record.marketInstanceId === null;
      if (launching) {
        pending++;
        continue;
      }
      try {
        await destroyReplica(record, row.instanceId);
      } catch (err) {
        pending++;
        ctx.logger.warn({ err, endpoint: endpoint.name, instance_id: row.instanceId }, "endpoint machine not destroyed yet; retrying next round");
      }
    }
    if (pending === 0 && (await endpoints.markDeleted(endpoint.id))) {
      await note(endpoint, "deleted", `deleted: ${facts.length} machine(s) destroyed`);
    }
  }

  return {
    async probeOnce() {
      const active = (await endpoints.listLive()).filter((e) => e.phase === "active");
      await Promise.all(
        active.map(async (endpoint) =>
          probeReplicas(deps, endpoint, await replicaFactsOf(deps, endpoint)).catch((err: unknown) =>
            ctx.logger.warn({ err, endpoint: endpoint.name }, "endpoint probes failed; retrying next round"),
          ),
        ),
      );
    },
    async decideOnce() {
      for (const endpoint of await endpoints.listLive()) {
        await decide(endpoint).catch((err: unknown) => ctx.logger.warn({ err, endpoint: endpoint.name }, "endpoint round failed; retrying next round"));
      }
    },
  };
}

/** An error's message, with its cause's (a marketplace's own words) when it wraps one. */
function failureText(err: unknown): string {
  const cause = err instanceof Error ? err.cause : undefined;
  return cause instanceof Error ? `${messageOf(err)} (${cause.message})` : messageOf(err);
}
