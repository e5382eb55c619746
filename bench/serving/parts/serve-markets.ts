// npm run bench:serve, its days on one market and on two (SPEC.md section 2, "Several
// marketplaces"): what each day's markets are, what happens to them when, and how long each
// endpoint took to be back at full strength after each event.
//
// The one-market day is bench:serve's day as it always was: the simulated market, half of the
// bids preempted at 14:00. The two-market day puts a second simulated market beside it, which
// rents on-demand machines only, from pools that renting never takes, and stands for RunPod (it
// is the simulated marketplace under another name and catalogue, not a RunPod adapter); the
// first, vast.ai-like market has no rentable offer from 10:00 to 13:00 (a dry spell) and preempts
// every bid at 14:00.
import type { Knex } from "knex";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import { createSimulatedMarketplace, type SimulatedMarketplace, type SimulatedMarketplaceOptions } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { BID_MARKET, createTwoSimulatedMarkets, ON_DEMAND_MARKET } from "../../../test/support/markets/two-simulated-markets.js";
import { clock, DAY_S } from "./serve-day.js";

const H = 3_600;

export interface MarketDay {
  name: "one market" | "two markets";
  /** The vast.ai-like market has no rentable offer over [fromS, toS) (simulated seconds of the day). */
  drySpell?: { fromS: number; toS: number };
  /** The moment of the day's mass preemption and the share of live bids it takes. */
  preemptAtS: number;
  preemptShare: number;
  /** What the day's markets are, for the printout. */
  describe: string;
}

/** The market a day's dry spell empties (the vast.ai-like one), as its offers name it. */
export const DRY_SPELL_MARKET = BID_MARKET;

export const ONE_MARKET_DAY: MarketDay = {
  name: "one market",
  preemptAtS: 14 * H,
  preemptShare: 0.5,
  describe: "the simulated market alone (bids and on-demand); half of the bids preempted at once at 14:00",
};

export const TWO_MARKET_DAY: MarketDay = {
  name: "two markets",
  drySpell: { fromS: 10 * H, toS: 13 * H },
  preemptAtS: 14 * H,
  preemptShare: 1,
  describe:
    `'${BID_MARKET}' (vast.ai-like: bids and on-demand) first, '${ON_DEMAND_MARKET}' (on-demand only, from pools, standing for RunPod: ` +
    "the simulated marketplace again under another name and catalogue, not a RunPod adapter) second; " +
    `'${BID_MARKET}' has no rentable offer from 10:00 to 13:00 (dry spell) and every bid is preempted at once at 14:00`,
};

/** BENCH_SERVE_DAYS: `one`, `two` or `one,two` (the default): the days to run, in this order. */
export function daysOf(value: string | undefined): MarketDay[] {
  const names = (value ?? "one,two").split(",").map((s) => s.trim());
  const days = names.map((n) => ({ one: ONE_MARKET_DAY, two: TWO_MARKET_DAY })[n]);
  if (names.length === 0 || days.some((d) => d === undefined) || new Set(names).size !== names.length) {
    throw new Error(`BENCH_SERVE_DAYS must be one, two or one,two, got '${value}'`);
  }
  return days as MarketDay[];
}

/** One policy's markets on a day: what its service rents from, and the vast.ai-like market the day's events hit. */
export interface PolicyMarkets {
  marketplace: Marketplace;
  bidMarket: SimulatedMarketplace;
  /** The bid market's own instance id of a service's market_instance_id (prefixed with the market when there are two). */
  ownId(marketInstanceId: string): string;
  /** Arms the day's dry spell once the day's wall start is known. */
  startDay(startMs: number, factor: number): void;
  close(): Promise<void>;
}

export function marketsFor(day: MarketDay, options: SimulatedMarketplaceOptions): PolicyMarkets {
  if (day.name === "one market") {
    const market = createSimulatedMarketplace(options);
    return { marketplace: market, bidMarket: market, ownId: (id) => id, startDay: () => undefined, close: () => market.close() };
  }
  const two = createTwoSimulatedMarkets(options);
  const prefix = `${BID_MARKET}:`;
  return {
    marketplace: two.marketplace,
    bidMarket: two.bids,
    ownId: (id) => (id.startsWith(prefix) ? id.slice(prefix.length) : id),
    startDay(startMs, factor) {
      if (!day.drySpell) return;
      const wall = (s: number) => startMs + (s * 1000) / factor;
      two.bids.setDrySpell({ fromMs: wall(day.drySpell.fromS), untilMs: wall(day.drySpell.toS) });
    },
    close: () => two.marketplace.close(),
  };
}

/** One look at an endpoint: its target and its ready replicas at a simulated second of the day. */
export interface StrengthSample {
  simS: number;
  target: number;
  ready: number;
}

/** How long a shortfall that begins this soon after an event is counted as the event's. */
export const SHORTFALL_WITHIN_S = H;

/**
 * Simulated seconds from the event to full strength again (ready >= target) after the first
 * shortfall (ready < target) that begins within SHORTFALL_WITHIN_S of it; "full throughout" when
 * no shortfall began then; "short at 24:00" when it never recovered. Samples in time order.
 */
export function backToFullStrength(samples: readonly StrengthSample[], eventS: number): number | "full throughout" | "short at 24:00" {
  // Samples past 24:00 (the last answers' wait) are not the day's.
  const after = samples.filter((s) => s.simS >= eventS && s.simS < DAY_S);
  const shortAt = after.findIndex((s) => s.ready < s.target);
  if (shortAt < 0 || after[shortAt]!.simS >= eventS + SHORTFALL_WITHIN_S) return "full throughout";
  const back = after.slice(shortAt).find((s) => s.ready >= s.target);
  return back === undefined ? "short at 24:00" : back.simS - eventS;
}

/** The events of a day whose recovery is measured: its dry spell's start and its mass preemption. */
export function eventsOf(day: MarketDay): Array<{ name: string; atS: number }> {
  return [
    ...(day.drySpell ? [{ name: `the dry spell's start (${clock(day.drySpell.fromS)})`, atS: day.drySpell.fromS }] : []),
    // Named by its moment alone, so that both days' preemptions share a row; the days' descriptions say how many bids it takes.
    { name: `the ${clock(day.preemptAtS)} preemption`, atS: day.preemptAtS },
  ];
}

/** The recovery in the printout's words: simulated minutes, or why there is no figure. */
export function recoveryText(value: ReturnType<typeof backToFullStrength>): string {
  return typeof value === "number" ? `${(value / 60).toFixed(1)} min` : value;
}

/** Machines an endpoint rented per market over the day, e.g. `simulated 12, simulated-ondemand 5`. */
export async function machinesPerMarket(knex: Knex, endpoint: string): Promise<string> {
  const rows = (await knex("gpu_instances").where({ endpoint }).groupBy("market").orderBy("market").select("market").count({ n: "*" })) as Array<{ market: string | null; n: string | number }>;
  return rows.map((r) => `${r.market ?? "the only market"} ${Number(r.n)}`).join(", ") || "none";
}
