// npm run bench:serve, the day's cost against its limit (SPEC.md section 2): an oracle that knows
// the whole day beforehand, a lower bound on what an autoscaled policy pays for the same load. At
// every moment it runs the replicas the load of that moment needs at the autoscaler's target
// (autoscaler.ts: ceil(requests in flight / target_in_flight), within max_replicas; the oracle
// holds no request), each replica only while it is needed, rented at that minute's cheapest
// fitting prices: bids where the bid market has them (at the bid the service makes, min_bid x
// (1 + bid_margin), plus storage), else on-demand offers in any market that has them. No cold
// start, no preemption. In the bid market's dry spell a machine rented before it runs on (only new
// rentals are refused, as on the simulated market), so the oracle may keep bids through the spell:
// each replica slot keeps its bid as long as that is cheaper than renting on-demand for the rest
// of the spell. A policy's dollars over the oracle's say how far it is from what the day could have
// cost at all.
import type { Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { asBids } from "../../../src/gpu/creation/bid-choice.js";
import { LLM_DISK_GB } from "../../../src/gpu/creation/launch-plan.js";
import { candidateFilter, fittingOffers } from "../../../src/gpu/creation/offer-choice.js";
import type { Marketplace, MarketOffer } from "../../../src/gpu/marketplace/port.js";
import { DAY_S } from "./serve-day.js";

/** The offers the oracle may rent, each priced as it is billed per hour. */
export interface OracleOffers {
  /** Fitting bids of the bid market, each one machine. */
  bids: readonly OraclePrice[];
  /** Fitting on-demand offers of every market; a pool rents any number of machines at its price. */
  onDemand: ReadonlyArray<OraclePrice & { market: string }>;
}

export interface OraclePrice {
  dollarsPerHour: number;
  pool: boolean;
}

/**
 * The fitting offers of the template on the day's markets, bids at the bench's margin. Read before
 * any event: the simulated markets' prices do not move over the day, and what the dry spell takes
 * away is oracleCost's to apply, minute by minute.
 */
export async function oracleOffers(marketplace: Marketplace, template: Template, bidMargin: number): Promise<OracleOffers> {
  const filter = candidateFilter(template, undefined, LLM_DISK_GB)!;
  const [bids, onDemand] = await Promise.all([marketplace.searchOffers({ ...filter, interruptible: true }), marketplace.searchOffers(filter)]);
  const price = (o: MarketOffer) => ({ dollarsPerHour: o.dphTotal, pool: o.pool === true });
  return {
    bids: fittingOffers(asBids(bids, bidMargin), template).map(price),
    onDemand: fittingOffers(onDemand, template).map((o) => ({ ...price(o), market: o.market ?? "" })),
  };
}

/** A stretch of the day over which the oracle runs the same number of replicas. */
export interface ReplicaStep {
  fromS: number;
  toS: number;
  replicas: number;
}

/**
 * The replicas the load needs at each moment of the day, as the autoscaler counts them:
 * ceil(requests in flight / targetInFlight) within maxReplicas, each request in flight for
 * `streamS` from its arrival; steps of no replica left out, and cut at each simulated minute so
 * that each step is priced at its minute's prices.
 */
export function replicaSteps(arrivals: readonly number[], streamS: number, targetInFlight: number, maxReplicas: number): ReplicaStep[] {
  const edges = arrivals.flatMap((s) => [
    [s, 1],
    [s + streamS, -1],
  ]);
  // Ends before starts at one moment: a request that ends as another begins is not counted twice.
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  const steps: ReplicaStep[] = [];
  let inFlight = 0;
  let last = 0;
  const close = (toS: number) => {
    const replicas = Math.min(maxReplicas, Math.ceil(inFlight / targetInFlight));
    // Cut at each minute boundary between last and toS.
    for (let from = last; from < toS; ) {
      const to = Math.min(toS, (Math.floor(from / 60) + 1) * 60);
      if (replicas > 0) steps.push({ fromS: from, toS: to, replicas });
      from = to;
    }
    last = Math.max(last, toS);
  };
  for (const [at, step] of edges) {
    close(Math.min(at!, DAY_S));
    inFlight += step!;
  }
  return steps;
}

export interface OracleDay {
  arrivals: readonly number[];
  /** How long each request is in flight, simulated s. */
  streamS: number;
  targetInFlight: number;
  maxReplicas: number;
  offers: OracleOffers;
  /** The bid market's shortage (no new rental of its own, bid or on-demand), simulated s; its market's name. */
  drySpell?: { fromS: number; toS: number; market: string };
}

export interface OracleCost {
  dollars: number;
  machineHours: number;
}

/** The oracle's dollars and machine-hours over the day. */
export function oracleCost(day: OracleDay): OracleCost {
  const steps = replicaSteps(day.arrivals, day.streamS, day.targetInFlight, day.maxReplicas);
  const spell = day.drySpell;
  const inSpell = (step: ReplicaStep) => spell !== undefined && step.fromS >= spell.fromS && step.fromS < spell.toS;
  let dollarSeconds = 0;
  let machineSeconds = 0;
  for (const step of steps.filter((s) => !inSpell(s))) {
    // Slot k of the step runs on the minute's k-th cheapest machine.
    const prices = cheapest([...day.offers.bids, ...day.offers.onDemand], step.replicas);
    dollarSeconds += sum(prices) * (step.toS - step.fromS);
    machineSeconds += prices.length * (step.toS - step.fromS);
  }
  if (spell !== undefined) {
    const spellCost = drySpellCost(steps.filter(inSpell), spell, day.offers, day.maxReplicas);
    dollarSeconds += spellCost.dollarSeconds;
    machineSeconds += spellCost.machineSeconds;
  }
  return { dollars: dollarSeconds / 3_600, machineHours: machineSeconds / 3_600 };
}

/**
 * The dry spell's cost: replica slot k (the k-th replica, needed whenever the load needs k or
 * more) keeps the k-th cheapest bid, rented the moment before the spell, up to the moment that
 * costs least, and runs on-demand in another market after it. The on-demand price is the cheapest
 * of the other markets for every slot: exact when it is a pool, less than any policy can pay when
 * it is one machine.
 */
function drySpellCost(steps: readonly ReplicaStep[], spell: { fromS: number; market: string }, offers: OracleOffers, maxReplicas: number): { dollarSeconds: number; machineSeconds: number } {
  const bids = cheapest(offers.bids, maxReplicas);
  const onDemand = cheapest(offers.onDemand.filter((o) => o.market !== spell.market), 1)[0] ?? Number.POSITIVE_INFINITY;
  let dollarSeconds = 0;
  let machineSeconds = 0;
  for (let k = 1; k <= maxReplicas; k++) {
    const used = steps.filter((s) => s.replicas >= k);
    if (used.length === 0) continue;
    const bid = bids[k - 1] ?? Number.POSITIVE_INFINITY;
    const usedS = sum(used.map((s) => s.toS - s.fromS));
    // The bid released at the spell's start or at the end of a stretch it ran (the cost is linear in between).
    let best = { dollarSeconds: Number.POSITIVE_INFINITY, machineSeconds: 0 };
    let usedBefore = 0;
    for (let i = -1; i < used.length; i++) {
      if (i >= 0) usedBefore += used[i]!.toS - used[i]!.fromS;
      const heldS = (i < 0 ? spell.fromS : used[i]!.toS) - spell.fromS;
      const after = usedS - usedBefore;
      const cost = (heldS > 0 ? bid * heldS : 0) + (after > 0 ? onDemand * after : 0);
      if (cost < best.dollarSeconds) best = { dollarSeconds: cost, machineSeconds: heldS + after };
    }
    if (!Number.isFinite(best.dollarSeconds)) throw new Error(`the oracle has no machine for replica ${k} in the dry spell`);
    dollarSeconds += best.dollarSeconds;
    machineSeconds += best.machineSeconds;
  }
  return { dollarSeconds, machineSeconds };
}

/** The n cheapest machines' prices: a one-machine offer once, a pool as often as wanted. */
function cheapest(offers: readonly OraclePrice[], n: number): number[] {
  const machines = offers.flatMap((o) => Array.from({ length: o.pool ? n : 1 }, () => o.dollarsPerHour));
  return machines.sort((a, b) => a - b).slice(0, n);
}

function sum(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0);
}
