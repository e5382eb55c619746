import { MARKET_STATUSES, type MarketStatus } from "../marketplace/port.js";

// Stored status values (db_info.status, status_filter, status_distribution) and how they follow
// the marketplace's. Pure, so that the mapping is tested on its own.

export const STORED_STATUSES = ["creating", "loading", "running", "running_llm", "exited", "failed", "destroyed"] as const;
export type StoredStatus = (typeof STORED_STATUSES)[number];

/** Instances that are, or are about to be, billed and serving. */
export const ACTIVE_STATUSES: readonly StoredStatus[] = ["creating", "loading", "running", "running_llm"];

/** Statuses no marketplace observation changes any more. */
export const TERMINAL_STATUSES: readonly StoredStatus[] = ["failed", "destroyed"];

export function isStoredStatus(value: string): value is StoredStatus {
  return (STORED_STATUSES as readonly string[]).includes(value);
}

export function isTerminal(status: StoredStatus): boolean {
  return TERMINAL_STATUSES.includes(status);
}

/**
 * The stored status for what the marketplace reports, given the stored one. `running` becomes
 * `running_llm` only when the model server answered its probe. `offline` (the host sends no
 * heartbeat, is rebooting or frozen: transient) changes nothing but that the model server is not
 * known to answer; only `exited` (stopped, or its container ended) says the machine is done, and
 * only it lets auto_destroy act (status-sync.ts). `preempted` is stored as `exited` too (the
 * stored values are a contract), and the record keeps when it was preempted (preempted_at).
 */
export function storedStatusOf(market: MarketStatus, llmAnswered: boolean, current: StoredStatus): StoredStatus {
  switch (market) {
    case "creating":
      return "creating";
    case "loading":
      return "loading";
    case "running":
      return llmAnswered ? "running_llm" : "running";
    case "exited":
    case "preempted":
      return "exited";
    case "offline":
      return current === "running_llm" ? "running" : current;
  }
}

/**
 * The marketplace statuses the API shows (basic_status.status, a contract): a preempted instance
 * shows `exited`, with `preempted` beside it.
 */
export const SHOWN_MARKET_STATUSES = MARKET_STATUSES.filter((s) => s !== "preempted");

export function shownMarketStatus(status: MarketStatus): string {
  return status === "preempted" ? "exited" : status;
}
