import { rest } from "../../helpers.js";
import type { MarketService } from "../../../support/markets/market-service.js";

// What the market tests read of the service's answers: offers with their market, each market's
// share of a search, and GET /api/gpu/markets.

export interface Offer {
  id: string;
  market: string;
  gpu_name: string;
  dph_total: number;
}

/** One market's part of an offer search (`markets` in the answer). */
export interface MarketAnswer {
  market: string;
  ok: boolean;
  offers: number;
  error?: string;
}

/** A market as GET /api/gpu/markets shows it. */
export interface Market {
  name: string;
  state: string;
  error?: string;
  since?: string;
  interruptible: boolean;
  instances: Array<{ instance_id: string; status: string; cost_per_hour: number }>;
  dph_total: number;
}

/** The service's view of its markets, and of its instance records. */
export function marketsApi(service: () => MarketService) {
  const url = () => service().server.url;
  const markets = async () => (await rest<{ markets: Market[] }>(url(), "GET", "/api/gpu/markets")).body.markets;
  return {
    url,
    markets,
    market: async (name: string) => (await markets()).find((m) => m.name === name)!,
    record: (id: string) => service().db.knex("gpu_instances").where({ instance_id: id }).first(),
  };
}
