import { Counter, Gauge, type Registry } from "prom-client";
import { directoryOf } from "./marketplace/markets/market-directory.js";
import type { Marketplace } from "./marketplace/port.js";
import type { SyncLeader } from "./lifecycle/sync-leader.js";
import type { StatisticsStore } from "./store/statistics-store.js";

/**
 * `gpu_instances{status}`: stored instances by status, read at scrape time from the statistics
 * summary (one small aggregate query, never a scan of the records).
 */
export function registerGpuMetrics(registry: Registry, statistics: StatisticsStore): void {
  new Gauge({
    name: "gpu_instances",
    help: "Stored GPU instances by status",
    labelNames: ["status"],
    registers: [registry],
    async collect() {
      this.reset();
      // A scrape while the database is away shows no samples rather than failing /metrics.
      const stats = await statistics.statistics().catch(() => undefined);
      for (const [status, count] of Object.entries(stats?.statusDistribution ?? {})) this.set({ status }, count);
    },
  });
}

/**
 * `gpu_sync_leader`: 1 while this process holds the sync leadership, else 0 (summed over the
 * processes on one database: 1; 0 means nobody runs the sync, the reconciler, the money limits
 * and the endpoint controller). `gpu_sync_leader_last_round_timestamp_seconds`: when a round
 * gated on the leadership last started here (no sample before the first); on the leader its age
 * stays within an interval, an older one means the rounds stopped.
 */
export function registerLeadershipMetrics(registry: Registry, leader: SyncLeader): void {
  new Gauge({
    name: "gpu_sync_leader",
    help: "1 while this process holds the GPU sync leadership",
    registers: [registry],
    collect() {
      this.set(leader.status().leading ? 1 : 0);
    },
  });
  new Gauge({
    name: "gpu_sync_leader_last_round_timestamp_seconds",
    help: "Unix time at which a round gated on the GPU sync leadership last started in this process",
    registers: [registry],
    collect() {
      this.reset();
      const at = leader.status().lastRoundAt;
      if (at) this.set(at.getTime() / 1000);
    },
  });
}

const MARKET_STATES = ["ok", "failing", "rate_limited", "blocked"] as const;

/**
 * Per configured market (MARKETPLACE): `gpu_market_calls_total` and `gpu_market_errors_total`
 * (failed calls; an answer about an offer, such as "taken", is no error), the waits for its rate
 * limit (`gpu_market_rate_limit_waits_total`, `gpu_market_rate_limit_wait_seconds_total`), and `gpu_market_state`,
 * 1 for the market's current state (ok, failing, rate_limited, blocked) and 0 for the others.
 */
export function registerMarketMetrics(registry: Registry, marketplace: Marketplace): void {
  const directory = directoryOf(marketplace);
  const counter = (name: string, help: string, count: (s: ReturnType<typeof directory.states>[number]) => number | undefined) =>
    new Counter({
      name,
      help,
      labelNames: ["market"],
      registers: [registry],
      collect() {
        this.reset();
        for (const state of directory.states()) this.inc({ market: state.market }, count(state) ?? 0);
      },
    });
  counter("gpu_market_calls_total", "Calls made to each configured GPU market", (s) => s.calls);
  counter("gpu_market_errors_total", "Failed calls to each configured GPU market", (s) => s.errors);
  counter("gpu_market_rate_limit_waits_total", "Calls held back by each GPU market's rate limit (its limiter's turn, or a 429 waited out)", (s) => s.rateLimitWaits?.count);
  counter("gpu_market_rate_limit_wait_seconds_total", "Time calls waited for each GPU market's rate limit, seconds", (s) => s.rateLimitWaits?.seconds);
  new Gauge({
    name: "gpu_market_state",
    help: "1 for each configured GPU market's current state (ok, failing, rate_limited, blocked)",
    labelNames: ["market", "state"],
    registers: [registry],
    collect() {
      this.reset();
      for (const { market, health } of directory.states()) {
        for (const state of MARKET_STATES) this.set({ market, state }, health.state === state ? 1 : 0);
      }
    },
  });
}
