import { Counter, Gauge, type Registry } from "prom-client";
import type { LiveFollower, LiveState } from "./live-follower.js";

const STATES: readonly LiveState[] = ["following", "catching_up", "waiting_for_elasticsearch", "standby", "off"];

/**
 * indexing_live_state{state} (1 for this process's state), indexing_live_pending_products,
 * indexing_live_retrying_products, indexing_live_oldest_pending_age_seconds and
 * indexing_live_last_applied_timestamp_seconds (the feed as last measured), and
 * indexing_live_applied_total (changes this process applied).
 * Returns the hook that counts applied changes.
 */
export function registerLiveMetrics(registry: Registry, follower: () => LiveFollower | undefined): (count: number) => void {
  const status = () => follower()?.lastStatus();
  new Gauge({
    name: "indexing_live_state",
    help: "1 for the live follower's state in this process: following, catching_up, waiting_for_elasticsearch, standby or off",
    labelNames: ["state"],
    registers: [registry],
    collect() {
      const current = status()?.state;
      for (const state of STATES) this.set({ state }, state === current ? 1 : 0);
    },
  });
  new Gauge({
    name: "indexing_live_pending_products",
    help: "Products changed and not yet applied to the goods index, as last measured",
    registers: [registry],
    collect() {
      this.set(status()?.pendingProducts ?? 0);
    },
  });
  new Gauge({
    name: "indexing_live_retrying_products",
    help: "Products Elasticsearch refused, retried with backoff, as last measured (also counted as pending)",
    registers: [registry],
    collect() {
      this.set(status()?.retryingProducts ?? 0);
    },
  });
  new Gauge({
    name: "indexing_live_oldest_pending_age_seconds",
    help: "Age of the oldest change not yet applied and never refused, as last measured; 0 when none",
    registers: [registry],
    collect() {
      this.set((status()?.oldestPendingAgeMs ?? 0) / 1000);
    },
  });
  new Gauge({
    name: "indexing_live_last_applied_timestamp_seconds",
    help: "When a change was last applied (Unix time), as last measured; 0 before the first",
    registers: [registry],
    collect() {
      this.set((status()?.lastAppliedAt?.getTime() ?? 0) / 1000);
    },
  });
  const applied = new Counter({ name: "indexing_live_applied_total", help: "Changes applied by this process's live follower", registers: [registry] });
  return (count) => applied.inc(count);
}
