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

/** The market a record's machine is (or is to be) rented on; a record from before several markets belongs to the first. */
export function marketOfRecord(ctx: GpuContext, record: InstanceRecord): string {
  const directory = directoryOf(ctx.marketplace);
  if (record.market !== null) return record.market;
  return record.marketInstanceId !== null ? directory.marketOfInstance(record.marketInstanceId) : directory.names[0]!;
}
