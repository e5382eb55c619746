import { describe, expect, it } from "vitest";
import { planEndpoint, type PlanSettings } from "../../../src/gpu/endpoints/control/endpoint-plan.js";
import type { EndpointRecord } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { probeOutcome } from "../../../src/gpu/endpoints/replicas/replica-probes.js";
import { endpointState, type ReplicaFacts } from "../../../src/gpu/endpoints/replicas/replica-state.js";
import { launchBackoffMs } from "../../../src/gpu/endpoints/control/endpoint-controller.js";
import type { InstanceRecord } from "../../../src/gpu/store/instance-store.js";
import type { StoredStatus } from "../../../src/gpu/store/status.js";
import { endpointRecord, replicaRow } from "./records.js";

// The controller's rules as tables: stored endpoint and observed replicas in, actions out.

const NOW = new Date("2026-11-26T12:00:00Z");
const ago = (ms: number) => new Date(NOW.getTime() - ms);
const SETTINGS: PlanSettings = { unhealthyMs: 180_000, startTimeoutMs: 1_200_000, drainMs: 30_000, missingGraceMs: 60_000 };

const endpoint = (fields: Partial<EndpointRecord> = {}) => endpointRecord(NOW, fields);

type Kind =
  | "ready"
  | "starting"
  | "provisioning"
  | "failing"
  | "unhealthy"
  | "never-ready"
  | "exited"
  | "draining"
  | "drained"
  | "drain-routed"
  | "missing"
  | "creating"
  | "destroying";

function replica(id: string, kind: Kind): ReplicaFacts {
  const row = replicaRow(NOW, id);
  let status: StoredStatus = "running_llm";
  let marketId: string | null = `m-${id}`;
  switch (kind) {
    case "ready":
      Object.assign(row, { successes: 5, readySince: ago(300_000) });
      break;
    case "failing":
      Object.assign(row, { readySince: ago(300_000), failedProbes: 3, failingSince: ago(30_000) });
      break;
    case "unhealthy":
      Object.assign(row, { readySince: ago(500_000), failedProbes: 20, failingSince: ago(200_000) });
      break;
    case "starting":
      status = "running";
      break;
    case "provisioning":
      status = "loading";
      break;
    case "creating":
      status = "creating";
      marketId = null;
      break;
    case "never-ready":
      Object.assign(row, { createdAt: ago(1_300_000) });
      status = "running";
      break;
    case "exited":
      Object.assign(row, { readySince: ago(300_000) });
      status = "exited";
      break;
    case "draining":
      Object.assign(row, { readySince: ago(300_000), draining: true, drainingSince: ago(10_000) });
      break;
    case "drained":
      Object.assign(row, { readySince: ago(300_000), draining: true, drainingSince: ago(31_000) });
      break;
    case "drain-routed":
      // 30.5 s into a 30 s drain: a process may have routed a request to it in its first second.
      Object.assign(row, { readySince: ago(300_000), draining: true, drainingSince: ago(30_500) });
      break;
    case "missing":
      Object.assign(row, { createdAt: ago(61_000), recordClaimedAt: null });
      return { row, record: null };
    case "destroying":
      Object.assign(row, { readySince: ago(300_000), destroyingAt: ago(1000), destroyEvent: { kind: "drained", detail: "b drained and destroyed" } });
      break;
  }
  return { row, record: { instanceId: id, status, marketInstanceId: marketId, costPerHour: 1 } as InstanceRecord };
}

const plan = (e: EndpointRecord, replicas: ReplicaFacts[]) => planEndpoint(e, replicas, NOW, SETTINGS).map((a) => `${a.kind}${"instanceId" in a ? ` ${a.instanceId}` : ""}${a.kind === "launch" && a.makeRoom ? ` (room: ${a.makeRoom})` : ""}`);

describe("endpoint plan", () => {
  it.each<[string, Partial<EndpointRecord>, Array<[string, Kind]>, string[]]>([
    ["a new endpoint launches every replica", {}, [], ["launch", "launch"]],
    ["enough ready replicas: nothing", {}, [["a", "ready"], ["b", "ready"]], []],
    ["replicas still coming are counted: nothing", {}, [["a", "ready"], ["b", "provisioning"]], []],
    ["a machine that exited is removed and replaced", {}, [["a", "ready"], ["b", "exited"]], ["remove b", "launch"]],
    ["a record that never came is removed and replaced", {}, [["a", "ready"], ["b", "missing"]], ["remove b", "launch"]],
    ["a replica failing for less than the limit is left alone", {}, [["a", "ready"], ["b", "failing"]], []],
    ["an unhealthy replica is condemned and a surge launched beside it", {}, [["a", "ready"], ["b", "unhealthy"]], ["condemn b", "launch (room: b)"]],
    ["a replica never ready within the start timeout is condemned", {}, [["a", "ready"], ["b", "never-ready"]], ["condemn b", "launch (room: b)"]],
    [
      "a condemned replica goes once its replacement is ready",
      {},
      [["a", "ready"], ["c", "ready"], ["b", "unhealthy"]],
      ["condemn b", "retire b"],
    ],
    [
      "no room for a surge (replicas + 1 machines): the old one goes first",
      { replicas: 1 },
      [["c", "provisioning"], ["b", "unhealthy"]],
      ["condemn b"],
    ],
    ["scale down: a replica not ready is destroyed at once", { replicas: 1 }, [["a", "ready"], ["b", "starting"]], ["scale_in b"]],
    ["a draining replica is destroyed after the drain time", { replicas: 1 }, [["a", "ready"], ["b", "drained"]], ["drained b"]],
    ["a draining replica keeps its in-flight requests meanwhile", { replicas: 1 }, [["a", "ready"], ["b", "draining"]], []],
    [
      "a drain lasts drainMs past the last moment a process's cached directory could route to it",
      { replicas: 1 },
      [["a", "ready"], ["b", "drain-routed"]],
      [],
    ],
    ["parked: every replica goes", { replicas: 0 }, [["a", "ready"], ["b", "starting"]], ["scale_in b", "drain a"]],
    ["a creation still waiting for the marketplace is not destroyed", { replicas: 0 }, [["a", "creating"]], []],
    [
      "scale down: a launch whose outcome is unknown is waited for, the ready replica keeps serving",
      { replicas: 1 },
      [["a", "ready"], ["b", "creating"]],
      [],
    ],
    ["scale down: a replica that missed a probe may hold requests: it drains", { replicas: 1 }, [["a", "ready"], ["b", "failing"]], ["drain b"]],
    ["scale down: the unhealthy before the ready, the starting before both", { replicas: 1 }, [["a", "ready"], ["b", "failing"], ["c", "starting"]], ["scale_in c", "drain b"]],
    ["scale back up during a drain: the draining replica is taken back, nothing launched", { replicas: 2 }, [["a", "ready"], ["b", "draining"]], ["undrain b"]],
    ["scale up past the draining ones: take them back, launch the rest", { replicas: 3 }, [["a", "ready"], ["b", "draining"]], ["undrain b", "launch"]],
    ["a replica the controller is destroying is finished, and bills until then", { replicas: 1 }, [["a", "ready"], ["b", "destroying"]], ["finish b"]],
    [
      "a replica being destroyed leaves no room for a surge: the unhealthy one goes first",
      { replicas: 1 },
      [["b", "destroying"], ["c", "unhealthy"]],
      ["finish b", "condemn c", "retire c", "launch"],
    ],
  ])("%s", (_what, fields, replicas, expected) => {
    expect(plan(endpoint(fields), replicas.map(([id, kind]) => replica(id, kind)))).toEqual(expected);
  });

  it("drains the newest ready replica when scaling down", () => {
    const older = replica("a", "ready");
    const newer = replica("b", "ready");
    newer.row.createdAt = ago(1000);
    expect(plan(endpoint({ replicas: 1 }), [newer, older])).toEqual(["drain b"]);
    expect(plan(endpoint({ replicas: 1 }), [older, newer])).toEqual(["drain b"]);
  });

  describe("an autoscaled endpoint", () => {
    const autoscale = { minReplicas: 0, maxReplicas: 3, targetInFlight: 4, scaleUpAfterS: 30, scaleDownAfterS: 600 };
    const load = (inFlight: number, held = 0, byReplica: Record<string, number> = {}) => ({
      inFlight,
      held,
      byReplica: new Map(Object.entries(byReplica)),
      lastRequestAt: null,
    });
    const kinds = (actions: ReturnType<typeof planEndpoint>) => actions.map((a) => (a.kind === "retarget" ? `${a.change.kind} ${a.change.from}->${a.change.to}` : a.kind));
    it("wakes at a held request and launches for the new target in the same round", () => {
      const actions = planEndpoint(endpoint({ autoscale, replicas: 0 }), [], NOW, SETTINGS, load(0, 1));
      expect(kinds(actions)).toEqual(["woke 0->1", "launch"]);
    });
    it("remembers since when the load wants more, and launches nothing before scale_up_after_s", () => {
      const actions = planEndpoint(endpoint({ autoscale, replicas: 1 }), [replica("a", "ready")], NOW, SETTINGS, load(9));
      expect(actions).toEqual([{ kind: "remember", memory: { direction: "up", since: NOW, bound: 3 } }]);
    });
    it("scales up once the load stayed above for scale_up_after_s", () => {
      const stored = endpoint({ autoscale, replicas: 1, autoscaleMemory: { direction: "up", since: ago(30_000), bound: 2 } });
      const actions = planEndpoint(stored, [replica("a", "ready")], NOW, SETTINGS, load(9));
      expect(kinds(actions)).toEqual(["scaled 1->2", "remember", "launch"]);
    });
    it("scales in the replica with the fewest requests in flight, draining it", () => {
      const stored = endpoint({ autoscale, replicas: 2, autoscaleMemory: { direction: "down", since: ago(600_000), bound: 1 } });
      const [a, b] = [replica("a", "ready"), replica("b", "ready")];
      b.row.createdAt = ago(1000); // the newest, but busier
      const actions = planEndpoint(stored, [a, b], NOW, SETTINGS, load(2, 0, { a: 0, b: 2 }));
      expect(kinds(actions)).toEqual(["scaled 2->1", "remember", "drain"]);
      expect(actions.at(-1)).toMatchObject({ kind: "drain", instanceId: "a" });
    });
  });

  describe("interruptible capacity", () => {
    const capacity = { interruptible: true, onDemandBase: 1, fallback: true, bidMargin: 0.25, markets: [], spreadMarkets: false };
    /** A replica in an interruptible slot: a bid, or an on-demand fallback standing in for one. */
    const slot = (id: string, kind: Kind, as: "bid" | "fallback") => {
      const facts = replica(id, kind);
      facts.row.interruptible = as === "bid";
      facts.row.fallback = as === "fallback";
      facts.record = { ...facts.record!, interruptible: as === "bid" };
      return facts;
    };
    const launches = (actions: ReturnType<typeof planEndpoint>) =>
      actions.map((a) => (a.kind === "launch" ? `launch ${a.interruptible ? (a.fallback ? "bid or fallback" : "bid only") : "on-demand"}` : `${a.kind}${"instanceId" in a ? ` ${a.instanceId}` : ""}`));
    it("fills on_demand_base with on-demand replicas first, the rest with bids that may fall back", () => {
      expect(launches(planEndpoint(endpoint({ replicas: 3, capacity }), [], NOW, SETTINGS))).toEqual(["launch on-demand", "launch bid or fallback", "launch bid or fallback"]);
    });
    it("rents everything on-demand without interruptible", () => {
      expect(launches(planEndpoint(endpoint({ replicas: 2 }), [], NOW, SETTINGS))).toEqual(["launch on-demand", "launch on-demand"]);
    });
    it("replaces an outbid bid at once with a bid", () => {
      const preempted = slot("b", "exited", "bid");
      preempted.record = { ...preempted.record!, preemptedAt: ago(1000) };
      const actions = planEndpoint(endpoint({ replicas: 2, capacity }), [replica("a", "ready"), preempted], NOW, SETTINGS);
      expect(launches(actions)).toEqual(["remove b", "launch bid or fallback"]);
      expect(actions[0]).toMatchObject({ kind: "remove", preempted: true });
    });
    it("tries one bid at a time beside the fallbacks, a bid or nothing, within replicas + 1", () => {
      const replicas = [replica("a", "ready"), slot("f1", "ready", "fallback"), slot("f2", "ready", "fallback")];
      expect(launches(planEndpoint(endpoint({ replicas: 3, capacity }), replicas, NOW, SETTINGS))).toEqual(["launch bid only"]);
      const coming = [...replicas, slot("b", "starting", "bid")];
      expect(launches(planEndpoint(endpoint({ replicas: 3, capacity }), coming, NOW, SETTINGS))).toEqual([]);
    });
    it("drains a fallback only once a bid that takes its place is ready", () => {
      const replicas = [replica("a", "ready"), slot("f1", "ready", "fallback"), slot("f2", "ready", "fallback"), slot("b", "ready", "bid")];
      expect(launches(planEndpoint(endpoint({ replicas: 3, capacity }), replicas, NOW, SETTINGS))).toEqual(["drain f1"]);
    });
    it("drains the fallbacks first when the target falls", () => {
      const replicas = [replica("a", "ready"), slot("f1", "ready", "fallback")];
      expect(launches(planEndpoint(endpoint({ replicas: 1, capacity }), replicas, NOW, SETTINGS))).toEqual(["drain f1"]);
    });
    it("starts the moves' backoff and wait over once nothing is left to move, and not before", () => {
      const backedOff = endpoint({ replicas: 2, capacity: { ...capacity, onDemandBase: 0 }, mixFailures: 6, nextMixAt: ago(-600_000), mixWaitSince: ago(300_000) });
      const moved = [slot("b1", "ready", "bid"), slot("b2", "ready", "bid")];
      expect(launches(planEndpoint(backedOff, moved, NOW, SETTINGS))).toEqual(["mix_settled"]);
      // The fallback that drains once its bid is ready is out of the mix already.
      const draining = [slot("b1", "ready", "bid"), slot("b2", "ready", "bid"), slot("f", "draining", "fallback")];
      expect(launches(planEndpoint(backedOff, draining, NOW, SETTINGS))).toEqual(["mix_settled"]);
      const fallbackLeft = [slot("b1", "ready", "bid"), slot("f", "ready", "fallback")];
      expect(launches(planEndpoint(backedOff, fallbackLeft, NOW, SETTINGS))).toEqual(["launch bid only"]);
      expect(launches(planEndpoint({ ...backedOff, mixFailures: 0, nextMixAt: null, mixWaitSince: null }, moved, NOW, SETTINGS))).toEqual([]);
    });

    describe("a PATCH of the capacity moves the running replicas, the new one first", () => {
      const off = { ...capacity, interruptible: false };
      it.each<[string, typeof capacity, Array<[string, Kind, "bid" | "fallback" | "on-demand"]>, string[]]>([
        ["interruptible off: an on-demand replica launched beside the bids, none drained yet", off, [["b1", "ready", "bid"], ["b2", "ready", "bid"]], ["launch on-demand"]],
        ["interruptible off: a bid drains once its on-demand replacement is ready", off, [["b1", "ready", "bid"], ["b2", "ready", "bid"], ["o", "ready", "on-demand"]], ["drain b2"]],
        ["interruptible off: nothing more while the replacement starts", off, [["b1", "ready", "bid"], ["b2", "ready", "bid"], ["o", "starting", "on-demand"]], []],
        ["interruptible off: never past replicas + 1 while a bid drains", off, [["b1", "ready", "bid"], ["o", "ready", "on-demand"], ["b2", "draining", "bid"]], []],
        ["a raised on_demand_base moves bids to on-demand up to it", { ...capacity, onDemandBase: 2 }, [["o", "ready", "on-demand"], ["b", "ready", "bid"]], ["launch on-demand"]],
        ["interruptible on: an on-demand replica past the base makes way for a bid, a bid or nothing", { ...capacity, onDemandBase: 0 }, [["o1", "ready", "on-demand"], ["o2", "ready", "on-demand"]], ["launch bid only"]],
        ["interruptible on: the on-demand replica drains once the bid is ready", { ...capacity, onDemandBase: 0 }, [["o1", "ready", "on-demand"], ["o2", "ready", "on-demand"], ["b", "ready", "bid"]], ["drain o2"]],
        ["the mix it asks for: nothing moves", capacity, [["o", "ready", "on-demand"], ["b", "ready", "bid"]], []],
        ["a fallback still starting is waited for, not replaced", { ...capacity, onDemandBase: 0 }, [["f1", "ready", "fallback"], ["f2", "starting", "fallback"]], []],
      ])("%s", (_what, settings, replicas, expected) => {
        const facts = replicas.map(([id, kind, as]) => (as === "on-demand" ? replica(id, kind) : slot(id, kind, as)));
        facts.forEach((f, i) => (f.row.createdAt = ago(600_000 - i * 1000)));
        expect(launches(planEndpoint(endpoint({ replicas: 2, capacity: settings }), facts, NOW, SETTINGS))).toEqual(expected);
      });

      describe("a PATCH of capacity.markets to runpod and simulated: a replica in a market left out is moved, its kind kept", () => {
        const narrowed = { ...capacity, onDemandBase: 1, markets: ["runpod", "simulated"] };
        it.each<[string, Array<[string, Kind, "bid" | "on-demand", string]>, string[]]>([
          ["an on-demand replica: an on-demand one launched beside it", [["o", "ready", "on-demand", "vastai"], ["b", "ready", "bid", "simulated"]], ["launch on-demand"]],
          ["a bid: a bid or nothing beside it", [["o", "ready", "on-demand", "runpod"], ["b", "ready", "bid", "vastai"]], ["launch bid only"]],
          ["the old one drains once the new one is ready (not the new one, of the same kind)", [["o1", "ready", "on-demand", "vastai"], ["b", "ready", "bid", "simulated"], ["o2", "ready", "on-demand", "runpod"]], ["drain o1"]],
          ["nothing while the new one starts", [["o1", "ready", "on-demand", "vastai"], ["b", "ready", "bid", "simulated"], ["o2", "starting", "on-demand", "runpod"]], []],
          ["every replica in a market named: nothing moves", [["o", "ready", "on-demand", "runpod"], ["b", "ready", "bid", "simulated"]], []],
        ])("%s", (_what, replicas, expected) => {
          const facts = replicas.map(([id, kind, as, market]) => {
            const f = as === "on-demand" ? replica(id, kind) : slot(id, kind, as);
            f.record = { ...f.record!, market };
            return f;
          });
          facts.forEach((f, i) => (f.row.createdAt = ago(600_000 - i * 1000)));
          expect(launches(planEndpoint(endpoint({ replicas: 2, capacity: narrowed }), facts, NOW, SETTINGS))).toEqual(expected);
        });
      });

      it("names the replica a move replaces, and the cost of the on-demand machine a bid must save 10% of", () => {
        const [o1, o2] = [replica("o1", "ready"), replica("o2", "ready")];
        o2.record = { ...o2.record!, costPerHour: 0.6 };
        o2.row.createdAt = ago(1000);
        const actions = planEndpoint(endpoint({ replicas: 2, capacity: { ...capacity, onDemandBase: 0 } }), [o1, o2], NOW, SETTINGS);
        expect(actions).toEqual([{ kind: "launch", interruptible: true, fallback: false, replaces: "o2", replacing: 0.6 }]);
      });
    });
  });

  describe("a budget lowered below what runs", () => {
    const priced = (id: string, kind: Kind, cost: number) => {
      const facts = replica(id, kind);
      facts.record = { ...facts.record!, costPerHour: cost };
      return facts;
    };
    it("sheds the costliest replicas, draining the ready ones, and launches nothing", () => {
      const replicas = [priced("a", "ready", 1), priced("b", "ready", 3), priced("c", "starting", 2)];
      expect(plan(endpoint({ replicas: 3, maxCostPerHour: 2 }), replicas)).toEqual(["drain b", "scale_in c", "hold_budget"]);
    });
    it("sheds a replica judged for replacement before a serving one", () => {
      const replicas = [priced("a", "ready", 1), priced("b", "unhealthy", 1), priced("c", "ready", 1)];
      expect(plan(endpoint({ replicas: 2, maxCostPerHour: 2 }), replicas)).toEqual(["condemn b", "retire b", "hold_budget"]);
    });
    it("lets the shed replicas drain without taking them back, then launches only what fits", () => {
      const shed = priced("b", "draining", 3);
      const actions = planEndpoint(endpoint({ replicas: 2, maxCostPerHour: 2 }), [priced("a", "ready", 1), shed], NOW, SETTINGS);
      expect(actions.map((a) => a.kind)).toEqual(["launch"]);
    });
    it("says why it holds the endpoint back", () => {
      const actions = planEndpoint(endpoint({ replicas: 2, maxCostPerHour: 1.5 }), [priced("a", "ready", 1), priced("b", "ready", 1)], NOW, SETTINGS);
      expect(actions.at(-1)).toEqual({ kind: "hold_budget", detail: "its machines cost $2/h, over its budget of $1.5/h: 1 replica(s) shed" });
    });
  });

  it("never plans past replicas + 1 machines", () => {
    const replicas = [replica("a", "unhealthy"), replica("b", "unhealthy"), replica("c", "provisioning")];
    const actions = planEndpoint(endpoint(), replicas, NOW, SETTINGS);
    const launches = actions.filter((a) => a.kind === "launch").length;
    const retires = actions.filter((a) => a.kind === "retire").length;
    expect(replicas.length - retires + launches).toBeLessThanOrEqual(3);
  });
});

describe("readiness from probes", () => {
  const fresh = { successes: 0, failedProbes: 0, readySince: null, failingSince: null };
  it("is ready after readyAfter consecutive successes", () => {
    expect(probeOutcome(fresh, true, 2, NOW).event).toBeUndefined();
    expect(probeOutcome({ ...fresh, successes: 1 }, true, 2, NOW)).toMatchObject({ fields: { readySince: NOW }, event: { kind: "ready" } });
  });
  it("leaves routing at the first failure and comes back at the next success", () => {
    const ready = { successes: 4, failedProbes: 0, readySince: ago(1000), failingSince: null };
    const failed = probeOutcome(ready, false, 2, NOW);
    expect(failed).toMatchObject({ fields: { successes: 0, failedProbes: 1, failingSince: NOW }, event: { kind: "not_ready" } });
    expect(probeOutcome({ ...ready, failedProbes: 1, failingSince: NOW }, false, 2, NOW).event).toBeUndefined();
    expect(probeOutcome({ ...ready, failedProbes: 2, failingSince: ago(5) }, true, 2, NOW)).toMatchObject({
      fields: { failedProbes: 0, failingSince: null, readySince: NOW },
      event: { kind: "ready" },
    });
  });
});

describe("endpoint state and backoff", () => {
  it("names the endpoint's state", () => {
    expect(endpointState(endpoint({ everReady: false }), [])).toBe("starting");
    expect(endpointState(endpoint(), [replica("a", "ready"), replica("b", "ready")])).toBe("ready");
    expect(endpointState(endpoint(), [replica("a", "ready"), replica("b", "failing")])).toBe("degraded");
    expect(endpointState(endpoint({ everReady: false, budgetHeld: true }), [replica("a", "ready")])).toBe("degraded");
    expect(endpointState(endpoint({ replicas: 0 }), [])).toBe("parked");
    expect(endpointState(endpoint({ phase: "deleting" }), [])).toBe("deleting");
  });
  it("backs launches off from 10 s, doubling, to 10 min", () => {
    expect([1, 2, 3, 4, 6, 7, 20].map(launchBackoffMs)).toEqual([10_000, 20_000, 40_000, 80_000, 320_000, 600_000, 600_000]);
  });
});
