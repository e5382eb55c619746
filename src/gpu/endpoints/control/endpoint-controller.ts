import { ACTOR_SYSTEM } from "../../../actor.js";
import type { EndpointConfig } from "../../../config.js";
import type { GpuContext } from "../../gpu-context.js";
import { destroyRecord } from "../../lifecycle/destroy.js";
import { isTerminal } from "../../store/status.js";
import type { EndpointEventStore, EventKind } from "../resource/endpoint-events.js";
import type { EndpointLoad, LoadStore } from "../load/load-store.js";
import type { TargetChange } from "./autoscaler.js";
import { planEndpoint, type Action, type PlanSettings } from "./endpoint-plan.js";
import type { EndpointRecord, EndpointStore } from "../resource/endpoint-store.js";
import { probeReplicas } from "../replicas/replica-probes.js";
import { replicaFactsOf } from "../replicas/replica-facts.js";
import { launchFailed, launchReplica } from "./replica-launch.js";
import type { ReadinessProbe } from "../replicas/readiness-probe.js";
import { billedCost, type ReplicaFacts } from "../replicas/replica-state.js";

// The endpoint controller: probes (replica-probes.ts) and decisions (the plan, endpoint-plan.ts,
// carried out here). Both run on the sync leader only, each on its own timer (endpoint-loop.ts),
// so that a launch waiting minutes for the marketplace never delays a probe; each endpoint's
// round runs on its own, so that one endpoint's slow rental never delays another's replacement,
// drain or delete. Every action that spends or destroys first confirms that this process still
// leads; a process that lost the lead mid-round does nothing more. Every launch writes its
// replica row before the creation writes its record and label before the marketplace call
// (replica-launch.ts), so a crash or a leader change at any point leaves a row that the next
// round counts (no duplicate) and a labelled machine the reconciler adopts or destroys (no orphan).

export interface EndpointControllerDeps {
  ctx: GpuContext;
  endpoints: EndpointStore;
  events: EndpointEventStore;
  probe: ReadinessProbe;
  settings: EndpointConfig & Pick<PlanSettings, "missingGraceMs">;
  /** The sync leadership, asked before every action that spends or destroys; absent: this process always leads. */
  leader?: { confirm(): Promise<boolean> };
  /** The load every proxy publishes, for the autoscaler and for scale-in; absent: no load known. */
  load?: Pick<LoadStore, "readLoad">;
}

export interface EndpointController {
  /** Probes every replica of every endpoint not deleted, at once. */
  probeOnce(): Promise<void>;
  /** Starts a round of decisions for every endpoint not deleted whose last round has ended; resolves once every round has ended. */
  decideOnce(): Promise<void>;
  /** Resolves once the rounds under way have ended. */
  settle(): Promise<void>;
}

export { launchBackoffMs, LAUNCH_BACKOFF_MS } from "./replica-launch.js";

/** Actions that spend or destroy: each first confirms the lead. */
const SPENDS_OR_DESTROYS = new Set<Action["kind"]>(["finish", "remove", "retire", "drained", "scale_in", "launch"]);

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
  /** A preempted replica was removed: its replacement goes at once, whatever the backoff. */
  urgent: boolean;
  /** The machines the endpoint's billed replicas run on. */
  machineIds: string[];
}

function newRound(facts: readonly ReplicaFacts[]): Round {
  const byId = new Map(facts.map((f) => [f.row.instanceId, f]));
  const costOf = (id: string) => {
    const f = byId.get(id);
    return f ? billedCost(f) : 0;
  };
  const machineIds = facts.flatMap((f) => (f.record?.machineId && billedCost(f) > 0 ? [f.record.machineId] : []));
  const spend = facts.reduce((sum, f) => sum + billedCost(f), 0);
  return { byId, costOf, spend, blocked: false, launched: false, held: undefined, urgent: false, machineIds };
}

/** The round stops here: this process lost the lead. */
class LeadLost extends Error {}

export function createEndpointController(deps: EndpointControllerDeps): EndpointController {
  const { ctx, endpoints, events, settings } = deps;
  const running = new Map<string, Promise<void>>();
  const confirmLead = async () => !deps.leader || (await deps.leader.confirm());
  const launchDeps = { ctx, endpoints, events, confirmLead };

  const note = (endpoint: EndpointRecord, kind: EventKind, detail: string, instanceId?: string) =>
    events.append({ endpointId: endpoint.id, kind, detail, instanceId: instanceId ?? null });

  async function decide(endpoint: EndpointRecord, load: EndpointLoad | undefined): Promise<void> {
    if (endpoint.phase === "deleting") return finishDelete(endpoint);
    const facts = await replicaFactsOf(deps, endpoint);
    await execute(endpoint, facts, planEndpoint(endpoint, facts, new Date(), settings, load));
  }

  /**
   * Destroys a replica's machine (unless it is over already) and drops the replica, then writes
   * its event. The decision is written down first: a destroy the marketplace confirms only later
   * (the sync loop retries it) is finished by a later round with this same event.
   */
  async function destroyReplica(endpoint: EndpointRecord, facts: ReplicaFacts | undefined, instanceId: string, kind: EventKind, detail: string): Promise<void> {
    await endpoints.replicas.markDestroying(instanceId, { kind, detail });
    await finish(endpoint, facts, instanceId, { kind, detail });
  }

  async function finish(endpoint: EndpointRecord, facts: ReplicaFacts | undefined, instanceId: string, event: { kind: EventKind; detail: string } | null) {
    const record = facts?.record ?? null;
    if (record && !isTerminal(record.status)) await destroyRecord(ctx, ACTOR_SYSTEM, record, "destroy_instance");
    await endpoints.replicas.remove(instanceId);
    if (event) await note(endpoint, event.kind, event.detail, instanceId);
  }

  /** Carries a round's actions out, in order. */
  async function execute(endpoint: EndpointRecord, facts: readonly ReplicaFacts[], actions: readonly Action[]): Promise<void> {
    const round = newRound(facts);
    for (const action of actions) {
      try {
        if (SPENDS_OR_DESTROYS.has(action.kind) && !(await confirmLead())) throw new LeadLost();
        await apply(endpoint, round, action);
      } catch (err) {
        if (err instanceof LeadLost) {
          ctx.logger.warn({ endpoint: endpoint.name, action: action.kind }, "endpoint round stopped: this process no longer leads");
          return;
        }
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
    if (action.kind === "launch") return launch(endpoint, round, action);
    if (action.kind === "retarget") return retarget(endpoint, action.change);
    if (action.kind === "remember") return endpoints.setAutoscaleMemory(endpoint.id, action.memory);
    if (action.kind === "hold_budget") {
      round.held = action.detail;
      round.blocked = true;
      return;
    }
    const facts = round.byId.get(action.instanceId);
    switch (action.kind) {
      case "finish":
        return finish(endpoint, facts, action.instanceId, facts?.row.destroyEvent ?? null);
      case "remove":
        return remove(endpoint, round, facts, action);
      case "condemn":
        await endpoints.replicas.condemn(action.instanceId);
        return note(endpoint, "unhealthy", `${action.instanceId} is replaced: ${action.reason}`, action.instanceId);
      case "retire":
        return retire(endpoint, round, action.instanceId, action.reason);
      case "drain":
        await endpoints.replicas.markDraining(action.instanceId);
        return note(endpoint, "scaled", `${action.instanceId} drains for ${settings.drainMs / 1000} s (${action.reason})`, action.instanceId);
      case "undrain":
        await endpoints.replicas.undrain(action.instanceId);
        return note(endpoint, "scaled", `${action.instanceId} taken back from draining (scale up to ${endpoint.replicas})`, action.instanceId);
      case "drained":
        return destroyReplica(endpoint, facts, action.instanceId, "drained", `${action.instanceId} drained and destroyed`);
      case "scale_in":
        round.spend -= round.costOf(action.instanceId);
        return destroyReplica(endpoint, facts, action.instanceId, "scaled", `${action.instanceId} destroyed before it was ready (${action.reason})`);
    }
  }

  /** The autoscaler's new target: the rest of the round plans for it. */
  async function retarget(endpoint: EndpointRecord, change: TargetChange): Promise<void> {
    if (!(await endpoints.setTarget(endpoint.id, change.to))) return;
    endpoint.replicas = change.to;
    if (change.to > change.from) endpoint.nextLaunchAt = null;
    await note(endpoint, change.kind, `replicas ${change.from} -> ${change.to}: ${change.why}`);
  }

  /** A machine that ended by itself: what remains of it is destroyed and the replica dropped. */
  async function remove(endpoint: EndpointRecord, round: Round, facts: ReplicaFacts | undefined, action: Extract<Action, { kind: "remove" }>) {
    const { instanceId, reason } = action;
    const record = facts?.record ?? null;
    // A launch whose record never came is given up only if its record is not being written now.
    if (record === null && !(await endpoints.replicas.removeUnclaimed(instanceId))) return;
    round.spend -= round.costOf(instanceId);
    if (record?.status === "failed") {
      // Nothing to destroy: a failed creation's machine is the creation's to release.
      await endpoints.replicas.remove(instanceId);
      return launchFailed(launchDeps, endpoint, `${instanceId}: ${reason}`, instanceId);
    }
    if (action.preempted) {
      // Outbid, not failed: out of routing already, its storage stops billing, replaced at once.
      round.urgent = true;
      return destroyReplica(endpoint, facts, instanceId, "preempted", `${instanceId} preempted: ${reason}; replaced at once`);
    }
    await destroyReplica(endpoint, facts, instanceId, "ended", `${instanceId} ended: ${reason}`);
    if (action.neverReady) await launchFailed(launchDeps, endpoint, `${instanceId} ended before it was ready`, instanceId);
  }

  async function launch(endpoint: EndpointRecord, round: Round, action: Extract<Action, { kind: "launch" }>): Promise<void> {
    const { makeRoom } = action;
    const backingOff = !round.urgent && endpoint.nextLaunchAt !== null && endpoint.nextLaunchAt.getTime() > Date.now();
    if (round.blocked || round.held || backingOff) return;
    // A change made since the round began (a PATCH, a DELETE) is seen before anything is rented.
    const current = await endpoints.get(endpoint.id);
    if (!current || changedSince(endpoint, current)) {
      round.blocked = true;
      return;
    }
    // The machines its other replicas run on, this round's launches included: a new one goes
    // elsewhere while offers there fit.
    const request = { interruptible: action.interruptible, fallback: action.fallback, avoidMachineIds: round.machineIds };
    const outcome = await launchReplica(launchDeps, endpoint, endpoint.maxCostPerHour - round.spend, request);
    if (outcome.kind === "launched") {
      round.spend += outcome.costPerHour;
      if (outcome.machineId) round.machineIds.push(outcome.machineId);
      round.launched = true;
    } else if (outcome.kind === "failed") {
      round.blocked = true;
    } else if (makeRoom) {
      // No surge fits the budget: the condemned one goes first, its replacement next round.
      await retire(endpoint, round, makeRoom, "no room in the budget for a replacement beside it");
      round.blocked = true;
    } else {
      round.held = outcome.detail;
    }
  }

  async function retire(endpoint: EndpointRecord, round: Round, instanceId: string, reason: string): Promise<void> {
    round.spend -= round.costOf(instanceId);
    await destroyReplica(endpoint, round.byId.get(instanceId), instanceId, "replaced", `${instanceId} destroyed: ${reason}`);
  }

  /** Deleting: every machine destroyed, then the endpoint is deleted. */
  async function finishDelete(endpoint: EndpointRecord): Promise<void> {
    const facts = await replicaFactsOf(deps, endpoint);
    let pending = 0;
    const now = Date.now();
    for (const f of facts) {
      const { row, record } = f;
      // A creation still under way (here, or on a leader that just lost its lock) is waited for:
      // destroying only once it has a machine or has failed leaves no machine behind.
      const launching = record === null ? now - row.createdAt.getTime() < settings.missingGraceMs : record.status === "creating" && record.marketInstanceId === null;
      if (launching || (record === null && !(await endpoints.replicas.removeUnclaimed(row.instanceId)))) {
        pending++;
        continue;
      }
      try {
        if (!(await confirmLead())) return;
        if (record && !isTerminal(record.status)) await destroyRecord(ctx, ACTOR_SYSTEM, record, "destroy_instance");
        await endpoints.replicas.remove(row.instanceId);
      } catch (err) {
        pending++;
        ctx.logger.warn({ err, endpoint: endpoint.name, instance_id: row.instanceId }, "endpoint machine not destroyed yet; retrying next round");
      }
    }
    if (pending === 0 && (await endpoints.markDeleted(endpoint.id))) {
      await note(endpoint, "deleted", `deleted: ${facts.length} machine(s) destroyed`);
    }
  }

  /** One round for the endpoint unless its last one is still under way. */
  function startRound(endpoint: EndpointRecord, load: EndpointLoad | undefined): Promise<void> {
    const under = running.get(endpoint.id);
    if (under) return under;
    const round = decide(endpoint, load)
      .catch((err: unknown) => ctx.logger.warn({ err, endpoint: endpoint.name }, "endpoint round failed; retrying next round"))
      .finally(() => running.delete(endpoint.id));
    running.set(endpoint.id, round);
    return round;
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
      const live = await endpoints.listLive();
      // The load every proxy published, summed; without it (database trouble) nobody scales on it this round.
      const loads = await deps.load?.readLoad(live.filter((e) => e.autoscale).map((e) => e.id)).catch((err: unknown) => {
        ctx.logger.warn({ err }, "endpoint load not read; the autoscaler waits for the next round");
        return undefined;
      });
      await Promise.all(live.map((e) => (e.autoscale && !loads ? Promise.resolve() : startRound(e, loads?.get(e.id)))));
    },
    async settle() {
      await Promise.all(running.values());
    },
  };
}

/** Whether what the caller sets (target, budget, phase) changed since the round read it. */
function changedSince(before: EndpointRecord, now: EndpointRecord): boolean {
  return now.phase !== before.phase || now.replicas !== before.replicas || now.maxCostPerHour !== before.maxCostPerHour;
}
