import type { GpuContext } from "../gpu-context.js";
import { directoryOf } from "../marketplace/markets/market-directory.js";
import type { MarketInstance } from "../marketplace/port.js";
import type { InstanceRecord } from "../store/instance-store.js";

// A round's view of the account's machines, market by market: each market is listed once, and a
// market that cannot be reached is named, so that its records keep their stored status (never
// failed or destroyed for that) while the other markets' records are synced and reconciled.

export interface MachinesOfRound {
  /** The machines of every market that answered; undefined when none did. */
  machines: MarketInstance[] | undefined;
  /** Markets that did not answer this round. */
  unreachable: ReadonlySet<string>;
}

export async function listEachMarket(ctx: GpuContext): Promise<MachinesOfRound> {
  const listings = await directoryOf(ctx.marketplace).listInstancesEach("");
  const unreachable = new Set(listings.filter((l) => !l.ok).map((l) => l.market));
  for (const listing of listings.filter((l) => !l.ok)) {
    ctx.logger.warn({ err: listing.cause, market: listing.market }, "a market did not list its instances; its records keep their status until it answers");
  }
  const answered = listings.filter((l) => l.ok);
  return { machines: answered.length > 0 ? answered.flatMap((l) => l.items) : undefined, unreachable };
}

/**
 * The market a record's machine is (or is to be) rented on: the one it names; for a record naming
 * none (written before several markets), the one market configured, and none while several are.
 */
export function marketOfRecord(ctx: GpuContext, record: InstanceRecord): string | undefined {
  const names = directoryOf(ctx.marketplace).names;
  if (record.market !== null) return record.market;
  return names.length === 1 ? names[0] : undefined;
}

/**
 * Whether calls about the record's machine have a market to go to now. A record of a market
 * MARKETPLACE no longer names (or naming none while several are configured) keeps its stored
 * status: never synced, failed or destroyed for that, until its market is configured again.
 */
export function hasItsMarket(ctx: GpuContext, record: InstanceRecord): boolean {
  // A bare adapter (as tests build them) is the one market of every record.
  if (!ctx.marketplace.markets) return true;
  const market = marketOfRecord(ctx, record);
  return market !== undefined && ctx.marketplace.markets.names.includes(market);
}

/**
 * At the start: live records from before several markets (no market named) belong to the market
 * configured when they were written. With exactly one market configured that is the one; with
 * several, each is named by the market that lists its machine under its id (reconciler.ts).
 */
export async function nameMarketOfOldRecords(ctx: GpuContext): Promise<void> {
  const names = ctx.marketplace.markets?.names;
  if (names?.length !== 1) return;
  const named = await ctx.instances.fillMarketOfLive(names[0]!);
  if (named > 0) ctx.logger.info({ market: names[0], records: named }, "live records from before several markets are named the one market configured");
}
