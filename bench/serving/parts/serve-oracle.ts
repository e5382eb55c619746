// npm run bench:serve, the day's cost against its limit (SPEC.md section 2): an oracle that knows
// the whole day beforehand. Each simulated minute it runs the replicas that minute's load needs at
// the autoscaler's target (the most streams in flight at once during the minute, over
// target_in_flight, within max_replicas), rented at that minute's cheapest fitting prices: bids
// where the bid market has them (at the bid the service makes, min_bid x (1 + bid_margin), plus
// storage), else on-demand offers in any market that has them. No cold start, no preemption, no
// replica kept a moment longer than its minute. A policy's dollars over the oracle's say how far
// it is from what the day could have cost at all.
import type { Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { asBids } from "../../../src/gpu/creation/bid-choice.js";
import { LLM_DISK_GB } from "../../../src/gpu/creation/launch-plan.js";
import { candidateFilter, fittingOffers } from "../../../src/gpu/creation/offer-choice.js";
import type { Marketplace, MarketOffer } from "../../../src/gpu/marketplace/port.js";
import { DAY_S } from "./serve-day.js";

const MINUTES = DAY_S / 60;

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

/** The fitting offers of the template on the day's markets (before any event), bids at the bench's margin. */
export async function oracleOffers(marketplace: Marketplace, template: Template, bidMargin: number): Promise<OracleOffers> {
  const filter = candidateFilter(template, undefined, LLM_DISK_GB)!;
  const [bids, onDemand] = await Promise.all([marketplace.searchOffers({ ...filter, interruptible: true }), marketplace.searchOffers(filter)]);
  const price = (o: MarketOffer) => ({ dollarsPerHour: o.dphTotal, pool: o.pool === true });
  return {
    bids: fittingOffers(asBids(bids, bidMargin), template).map(price),
    onDemand: fittingOffers(onDemand, template).map((o) => ({ ...price(o), market: o.market ?? "" })),
  };
}

/** The most requests in flight at once in each simulated minute of the day, each lasting `streamS` from its arrival. */
export function inFlightPeaks(arrivals: readonly number[], streamS: number): number[] {
  const edges = arrivals.flatMap((s) => [
    [s, 1],
    [s + streamS, -1],
  ]);
  // Ends before starts at one moment: a request that ends as another begins is not counted twice.
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  const peaks = Array.from({ length: MINUTES }, () => 0);
  let inFlight = 0;
  let minute = 0;
  for (const [at, step] of edges) {
    const m = Math.min(MINUTES - 1, Math.floor(at! / 60));
    // Requests still in flight carry into the minutes between two edges.
    for (; minute < m; minute++) peaks[minute + 1] = Math.max(peaks[minute + 1]!, inFlight);
    inFlight += step!;
    peaks[m] = Math.max(peaks[m]!, inFlight);
  }
  return peaks;
}

export interface OracleDay {
  arrivals: readonly number[];
  /** How long each request is in flight, simulated s. */
  streamS: number;
  targetInFlight: number;
  maxReplicas: number;
  offers: OracleOffers;
  /** The bid market's shortage (no offer of its own, bid or on-demand), simulated s; its market's name. */
  drySpell?: { fromS: number; toS: number; market: string };
}

export interface OracleCost {
  dollars: number;
  machineHours: number;
}

/** The oracle's dollars and machine-hours over the day. */
export function oracleCost(day: OracleDay): OracleCost {
  const peaks = inFlightPeaks(day.arrivals, day.streamS);
  // Summed in whole micro-dollars per hour, one term per machine-minute: no float drift over the day.
  let microDollarMinutes = 0;
  let machineMinutes = 0;
  for (const [minute, peak] of peaks.entries()) {
    const replicas = Math.min(day.maxReplicas, Math.ceil(peak / day.targetInFlight));
    if (replicas === 0) continue;
    const s = minute * 60;
    const dry = day.drySpell !== undefined && s >= day.drySpell.fromS && s < day.drySpell.toS;
    const onDemand = dry ? day.offers.onDemand.filter((o) => o.market !== day.drySpell!.market) : day.offers.onDemand;
    const prices = cheapest([...(dry ? [] : day.offers.bids), ...onDemand], replicas);
    microDollarMinutes += prices.reduce((sum, p) => sum + Math.round(p * 1_000_000), 0);
    machineMinutes += prices.length;
  }
  return { dollars: microDollarMinutes / 60 / 1_000_000, machineHours: machineMinutes / 60 };
}

/** The n cheapest machines' prices: a one-machine offer once, a pool as often as wanted. */
function cheapest(offers: readonly OraclePrice[], n: number): number[] {
  const machines = offers.flatMap((o) => Array.from({ length: o.pool ? n : 1 }, () => o.dollarsPerHour));
  return machines.sort((a, b) => a - b).slice(0, n);
}
