import type { EndpointLoad } from "../load/load-store.js";
import type { TargetChange } from "./autoscaler.js";
import { planEndpoint, type Action } from "./endpoint-plan.js";
import type { EndpointRecord } from "../resource/endpoint-store.js";
import { probeReplicas } from "../replicas/replica-probes.js";
import { replicaFactsOf } from "../replicas/replica-facts.js";
import { launchBackoffMs, launchReplica } from "./replica-launch.js";
import { createMarketBackoff } from "./market-backoff.js";
import { LeadLost, newRound, note, type EndpointControllerDeps, type Round, type RoundDeps } from "./control-round.js";
import { condemn, drain, drained, finish, remove, retire, scaleIn, undrain } from "./replica-actions.js";
import { finishDelete } from "./endpoint-delete.js";

// The endpoint controller: probes (replica-probes.ts) and decisions (the plan, endpoint-plan.ts,
// carried out here: the actions on replicas in replica-actions.ts, launches in
// replica-launch.ts, deletes in endpoint-delete.ts). Both run on the sync leader only, each on its
// own timer (endpoint-loop.ts), so that a launch waiting minutes for the marketplace never delays
// a probe; each endpoint's round runs on its own, so that one endpoint's slow rental never delays
// another's. Within an endpoint, a round's launches go on in a lane of their own, one after
// another, while the next rounds carry on with removals, drains and preemptions (they launch
// nothing until the lane is done). Every action that spends or destroys first confirms that this
// process still leads on the lease the round started on; a process that lost the lead mid-round,
// even one that took it again since, does nothing more. Every launch writes its replica row before
// the creation writes its record and label before the marketplace call (replica-launch.ts), so a
// crash or a leader change at any point leaves a row that the next round counts (no duplicate)
// and a labelled machine the reconciler adopts or destroys (no orphan).

export type { EndpointControllerDeps };

export interface EndpointController {
  /** Probes every replica of every endpoint not deleted, at once. */
  probeOnce(): Promise<void>;
  /** Starts a round of decisions for every endpoint not deleted whose last round has ended; resolves once every round, and the launches it started, have ended. */
  decideOnce(): Promise<void>;
  /** Resolves once the rounds and launches under way have ended. */
  settle(): Promise<void>;
}

export { launchBackoffMs, LAUNCH_BACKOFF_MS } from "./replica-launch.js";

/** Actions that spend or destroy: each first confirms the lead. */
const SPENDS_OR_DESTROYS = new Set<Action["kind"]>(["finish", "remove", "retire", "drained", "scale_in", "launch"]);

/** The endpoint changed since the round read it (a PATCH, a DELETE): the next round decides on what it says now. */
class EndpointChanged extends Error {}

type Launch = Extract<Action, { kind: "launch" }>;

export function createEndpointController(deps: EndpointControllerDeps): EndpointController {
  const { ctx, endpoints } = deps;
  const rounds = new Map<string, Promise<void>>();
  const lanes = new Map<string, Promise<void>>();
  const marketBackoff = createMarketBackoff(launchBackoffMs);

  /** The round's deps: the lead it confirms is the lease it starts on. */
  function roundDeps(): RoundDeps {
    const term = deps.leader?.term();
    return { ...deps, marketBackoff, confirmLead: async () => !deps.leader || (await deps.leader.confirm(term)) };
  }

  async function decide(endpoint: EndpointRecord, load: EndpointLoad | undefined): Promise<void> {
    const rd = roundDeps();
    if (endpoint.phase === "deleting") return finishDelete(rd, endpoint);
    const facts = await replicaFactsOf(deps, endpoint);
    const actions = planEndpoint(endpoint, facts, new Date(), deps.settings, load);
    const round = newRound(facts);
    const launches = actions.filter((a): a is Launch => a.kind === "launch");
    // A launch under way reports its own failure (in the marketplace's words): its failed record waits for it.
    const launching = lanes.has(endpoint.id);
    const reportedByLane = (a: Action) => launching && a.kind === "remove" && round.byId.get(a.instanceId)?.record?.status === "failed";
    if (!(await carryOut(rd, endpoint, round, actions.filter((a) => a.kind !== "launch" && !reportedByLane(a))))) return;
    // Launches of an earlier round are under way: they fill what this round would.
    if (lanes.has(endpoint.id)) return;
    if (launches.length === 0) return settleBudgetHold(rd, endpoint, round, launches);
    const lane = carryOut(rd, endpoint, round, launches)
      .then(async (leads) => {
        if (leads) await settleBudgetHold(rd, endpoint, round, launches);
      })
      .catch((err: unknown) => ctx.logger.warn({ err, endpoint: endpoint.name }, "endpoint launches failed; retrying next round"))
      .finally(() => lanes.delete(endpoint.id));
    lanes.set(endpoint.id, lane);
  }

  /** Carries actions out, in order; false when the round must stop (the lead lost, the endpoint changed). */
  async function carryOut(rd: RoundDeps, endpoint: EndpointRecord, round: Round, actions: readonly Action[]): Promise<boolean> {
    for (const action of actions) {
      try {
        if (SPENDS_OR_DESTROYS.has(action.kind) && !(await rd.confirmLead())) throw new LeadLost();
        await apply(rd, endpoint, round, action);
      } catch (err) {
        if (err instanceof LeadLost) {
          ctx.logger.warn({ endpoint: endpoint.name, action: action.kind }, "endpoint round stopped: this process no longer leads");
          return false;
        }
        if (err instanceof EndpointChanged) return false;
        ctx.logger.warn({ err, endpoint: endpoint.name, action: action.kind }, "endpoint action failed; retrying next round");
        // A destroy the marketplace did not confirm stops this round's launches: money first.
        round.blocked = true;
      }
    }
    return true;
  }

  /**
   * The hold is over once a launch went through, or none is wanted; a launch not tried (backoff)
   * changes nothing. A launch that moves the mix never holds a full-strength endpoint back.
   */
  async function settleBudgetHold(rd: RoundDeps, endpoint: EndpointRecord, round: Round, launches: readonly Launch[]): Promise<void> {
    const wanted = launches.some((a) => a.replaces === undefined);
    if (round.held && !endpoint.budgetHeld) {
      await endpoints.setControl(endpoint.id, { budgetHeld: true });
      await note(rd, endpoint, "budget_held", round.held);
    } else if (!round.held && endpoint.budgetHeld && (round.launched || !wanted)) {
      await endpoints.setControl(endpoint.id, { budgetHeld: false });
    }
  }

  async function apply(rd: RoundDeps, endpoint: EndpointRecord, round: Round, action: Action): Promise<void> {
    switch (action.kind) {
      case "launch":
        return launch(rd, endpoint, round, action);
      case "retarget":
        return retarget(rd, endpoint, action.change);
      case "remember":
        if (!(await endpoints.setAutoscaleMemory(endpoint.id, endpoint, action.memory))) throw new EndpointChanged();
        return;
      case "mix_settled":
        // Nothing left to move: the next wave of moves starts from the first backoff step.
        return endpoints.setControl(endpoint.id, { mixFailures: 0, nextMixAt: null, mixWaitSince: null });
      case "hold_budget":
        round.held = action.detail;
        round.blocked = true;
        return;
      case "finish": {
        const facts = round.byId.get(action.instanceId);
        return finish(rd, endpoint, facts, action.instanceId, facts?.row.destroyEvent ?? null);
      }
      case "remove":
        return remove(rd, endpoint, round, action);
      case "condemn":
        return condemn(rd, endpoint, action);
      case "retire":
        return retire(rd, endpoint, round, action.instanceId, action.reason);
      case "drain":
        return drain(rd, endpoint, action);
      case "undrain":
        return undrain(rd, endpoint, action);
      case "drained":
        return drained(rd, endpoint, round, action);
      case "scale_in":
        return scaleIn(rd, endpoint, round, action);
    }
  }

  /** The autoscaler's new target: the rest of the round plans for it, unless a PATCH changed the endpoint meanwhile. */
  async function retarget(rd: RoundDeps, endpoint: EndpointRecord, change: TargetChange): Promise<void> {
    if (!endpoint.autoscale || !(await endpoints.setTarget(endpoint.id, change.from, endpoint.autoscale, change.to))) throw new EndpointChanged();
    endpoint.replicas = change.to;
    if (change.to > change.from) endpoint.nextLaunchAt = null;
    await note(rd, endpoint, change.kind, `replicas ${change.from} -> ${change.to}: ${change.why}`);
  }

  async function launch(rd: RoundDeps, endpoint: EndpointRecord, round: Round, action: Launch): Promise<void> {
    const { makeRoom } = action;
    if (round.blocked || round.held || closed(endpoint, round, action)) return;
    // A change made since the round began (a PATCH, a DELETE) is seen before anything is rented.
    const current = await endpoints.get(endpoint.id);
    if (!current || changedSince(endpoint, current)) {
      round.blocked = true;
      return;
    }
    // The backoffs as they are now: a launch of an earlier round may have moved them since this round read them.
    Object.assign(endpoint, backoffsOf(current));
    if (closed(endpoint, round, action)) return;
    // The machines its other replicas run on, this round's launches included: a new one goes
    // elsewhere while offers there fit.
    const request = {
      interruptible: action.interruptible,
      fallback: action.fallback,
      avoidMachineIds: round.machineIds,
      replicaMarkets: round.replicaMarkets,
      replacing: action.replacing,
      replaces: action.replaces,
    };
    const outcome = await launchReplica(rd, endpoint, endpoint.maxCostPerHour - round.spend, request);
    if (outcome.kind === "launched") {
      round.spend += outcome.costPerHour;
      if (outcome.machineId) round.machineIds.push(outcome.machineId);
      if (outcome.market) round.replicaMarkets.push(outcome.market);
      round.launched = true;
    } else if (outcome.kind === "failed") {
      round.blocked = true;
    } else if (outcome.kind === "waiting") {
      // A move found no bid worth it: nothing rented, nothing held back; looked at again later.
    } else if (makeRoom) {
      // No surge fits the budget: the condemned one goes first, its replacement next round.
      await retire(rd, endpoint, round, makeRoom, "no room in the budget for a replacement beside it");
      round.blocked = true;
    } else {
      round.held = outcome.detail;
    }
  }

  /** One round for the endpoint unless its last one is still under way. */
  function startRound(endpoint: EndpointRecord, load: EndpointLoad | undefined): Promise<void> {
    const under = rounds.get(endpoint.id);
    if (under) return under;
    const round = decide(endpoint, load)
      .catch((err: unknown) => ctx.logger.warn({ err, endpoint: endpoint.name }, "endpoint round failed; retrying next round"))
      .finally(() => rounds.delete(endpoint.id));
    rounds.set(endpoint.id, round);
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
      const loads = await deps.load?.readLoad(live.map((e) => e.id)).catch((err: unknown) => {
        ctx.logger.warn({ err }, "endpoint load not read; the autoscaler waits for the next round");
        return undefined;
      });
      await Promise.all(live.map((e) => (e.autoscale && !loads ? Promise.resolve() : startRound(e, loads?.get(e.id)))));
      // And their launches: the loop does not await this (a tick never waits for a rental).
      await Promise.all(lanes.values());
    },
    async settle() {
      await Promise.all(rounds.values());
      await Promise.all(lanes.values());
    },
  };
}

/** Whether the launch's gate is closed: a move of the mix has a backoff of its own; a preempted replica's replacement ignores the backoff. */
function closed(endpoint: EndpointRecord, round: Round, action: Launch): boolean {
  const gate = action.replaces !== undefined ? endpoint.nextMixAt : round.urgent ? null : endpoint.nextLaunchAt;
  return gate !== null && gate.getTime() > Date.now();
}

function backoffsOf(e: EndpointRecord): Pick<EndpointRecord, "launchFailures" | "nextLaunchAt" | "mixFailures" | "nextMixAt" | "mixWaitSince"> {
  return { launchFailures: e.launchFailures, nextLaunchAt: e.nextLaunchAt, mixFailures: e.mixFailures, nextMixAt: e.nextMixAt, mixWaitSince: e.mixWaitSince };
}

/** Whether what the caller sets (target, budget, capacity, phase) changed since the round read it. */
function changedSince(before: EndpointRecord, now: EndpointRecord): boolean {
  return (
    now.phase !== before.phase ||
    now.replicas !== before.replicas ||
    now.maxCostPerHour !== before.maxCostPerHour ||
    JSON.stringify(now.capacity) !== JSON.stringify(before.capacity)
  );
}
