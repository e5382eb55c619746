import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ListMarketsResponseSchema, MarketAnswerSchema } from "../../gen/gpu/v1/gpu_service_pb.js";
import { DomainError, excerpt, InvalidInputError, UnavailableError } from "../errors.js";
import type { GpuContext } from "./gpu-context.js";
import { directoryOf } from "./marketplace/markets/market-directory.js";
import { searchOffers, type OfferQuery, type OfferSearchResult } from "./marketplace/offers.js";
import { roundMoney } from "./money/cost.js";
import { isTerminal } from "./store/status.js";
import type { InstanceRecord } from "./store/instance-store.js";

// What the offer and market RPCs read across the configured markets: a search over every
// market's catalogue at once (one that fails leaves the others' offers, and `markets` says
// which answered), and each market's state with its live instances.

export interface MarketOfferSearch extends OfferSearchResult {
  markets: Array<MessageInitShape<typeof MarketAnswerSchema>>;
}

/** The offer search over the markets, narrowed to `market` when given (a configured name, else 400 naming `market`). */
export async function searchMarkets(ctx: GpuContext, query: OfferQuery & { market?: string }): Promise<MarketOfferSearch> {
  const directory = directoryOf(ctx.marketplace);
  const names = query.market === undefined ? directory.names : [knownMarket(directory.names, query.market)];
  const listings = (await directory.listOffersEach()).filter((l) => names.includes(l.market));
  if (listings.every((l) => !l.ok)) throw unlisted(listings[0]?.cause);
  const found = searchOffers(
    listings.flatMap((l) => l.items),
    query,
  );
  const inAnswer = (market: string) => found.offers.filter((o) => (o.market ?? market) === market).length;
  return {
    ...found,
    markets: listings.map((l) => ({ market: l.market, ok: l.ok, offers: l.ok ? inAnswer(l.market) : 0, ...(l.error !== undefined && { error: l.error }) })),
  };
}

/** No market answered: a refused key or another misconfiguration answers as itself (500 naming the variable), not as a 503. */
function unlisted(cause: unknown): DomainError {
  if (cause instanceof DomainError && !(cause instanceof UnavailableError)) return cause;
  return new UnavailableError("The marketplace did not list its offers", { cause });
}

function knownMarket(names: readonly string[], market: string): string {
  if (names.includes(market)) return market;
  throw new InvalidInputError(`market must be one of the configured markets ${names.join(", ")}, got '${excerpt(market)}'`, { extra: { field: "market" } });
}

/**
 * GET /api/gpu/markets: each configured market's state, its live instances (dearest first) and
 * their $/h; then each market MARKETPLACE no longer names that live records are still rented on,
 * as `unconfigured` with those records (they keep their status until it is configured again).
 */
export async function listMarkets(ctx: GpuContext): Promise<MessageInitShape<typeof ListMarketsResponseSchema>> {
  const directory = directoryOf(ctx.marketplace);
  const live = (await ctx.instances.listLive()).filter((r) => !isTerminal(r.status));
  const marketOf = (r: InstanceRecord) => r.market ?? (directory.names.length === 1 ? directory.names[0] : undefined);
  const entry = (market: string) => {
    const instances = live
      .filter((r) => marketOf(r) === market)
      .map((r) => ({ instanceId: r.instanceId, status: r.status, costPerHour: r.costPerHour }))
      .sort((a, b) => b.costPerHour - a.costPerHour || a.instanceId.localeCompare(b.instanceId));
    return { name: market, instances, dphTotal: roundMoney(instances.reduce((sum, i) => sum + i.costPerHour, 0)) };
  };
  const configured = directory.states().map(({ market, health, interruptible }) => ({
    ...entry(market),
    state: health.state,
    ...(health.error !== undefined && { error: health.error }),
    ...(health.since && { since: timestampFromDate(health.since) }),
    ...(health.until && { until: timestampFromDate(health.until) }),
    interruptible,
  }));
  const elsewhere = [...new Set(live.map(marketOf))].filter((m): m is string => m !== undefined && !directory.names.includes(m)).sort();
  return { markets: [...configured, ...elsewhere.map((market) => ({ ...entry(market), state: "unconfigured", interruptible: false }))] };
}
