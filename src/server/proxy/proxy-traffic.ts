import { FIRST_BYTE_BOUNDS_MS, type ProxyTraffic, type TrafficEntry, type TrafficOutcome } from "../../module.js";
import type { ProxyMetrics } from "./proxy-metrics.js";

// What this process's endpoint proxy answered, per endpoint and minute (module.ts, ProxyTraffic),
// for the endpoints' history: counted from the proxy's own metrics calls (withTraffic), so that
// the proxy counts each request once, in one place. The GPU module publishes the minutes.

/** Minutes kept after they end: room for a publish that failed a few times (the database away). */
const KEEP_MINUTES = 5;
const MINUTE_MS = 60_000;

interface Minute {
  entry: TrafficEntry;
  changedAt: number;
}

export function createProxyTraffic(now: () => number = Date.now): ProxyTraffic {
  const minutes = new Map<string, Minute>();
  // Each endpoint's minute now: a request within it is counted with no key built or looked up.
  const current = new Map<string, { start: number; minute: Minute }>();
  const minuteOf = (endpointName: string): Minute => {
    const at = now();
    const start = at - (at % MINUTE_MS);
    const known = current.get(endpointName);
    // (changedSince drops only minutes long past: the current one is always in `minutes`.)
    if (known !== undefined && known.start === start) {
      known.minute.changedAt = at;
      return known.minute;
    }
    const key = `${start}\n${endpointName}`;
    let minute = minutes.get(key);
    if (minute === undefined) {
      const counts = { ok: 0, clientError: 0, serverError: 0, held: 0, continued: 0, cut: 0 };
      minute = { entry: { endpointName, minute: new Date(start), counts, firstByte: FIRST_BYTE_BOUNDS_MS.map(() => 0).concat(0) }, changedAt: at };
      minutes.set(key, minute);
    }
    current.set(endpointName, { start, minute });
    minute.changedAt = at;
    return minute;
  };
  return {
    count(endpointName, outcome) {
      minuteOf(endpointName).entry.counts[outcome] += 1;
    },
    firstByte(endpointName, ms) {
      const found = FIRST_BYTE_BOUNDS_MS.findIndex((bound) => ms <= bound);
      const buckets = minuteOf(endpointName).entry.firstByte;
      const bucket = found < 0 ? FIRST_BYTE_BOUNDS_MS.length : found;
      buckets[bucket] = buckets[bucket]! + 1;
    },
    changedSince(since) {
      const oldest = now() - (KEEP_MINUTES + 1) * MINUTE_MS;
      const changed: TrafficEntry[] = [];
      for (const [key, minute] of minutes) {
        if (minute.entry.minute.getTime() < oldest) minutes.delete(key);
        else if (minute.changedAt >= since) changed.push(structuredClone(minute.entry));
      }
      return changed;
    },
  };
}

/** The answer's status as the history counts it: a caller that left (499) is a client error. */
export function outcomeOf(status: number): TrafficOutcome {
  if (status >= 500) return "serverError";
  if (status >= 400) return "clientError";
  return "ok";
}

/**
 * The proxy's metrics, also counted as traffic: answers by status class, waits as held, answers
 * continued on another replica as continued, and answers ended with an error mid-stream as cut.
 */
export function withTraffic(metrics: ProxyMetrics, traffic: ProxyTraffic): ProxyMetrics {
  return {
    ...metrics,
    answered(endpoint, code) {
      metrics.answered(endpoint, code);
      traffic.count(endpoint, outcomeOf(code));
    },
    firstByte(endpoint, seconds) {
      metrics.firstByte(endpoint, seconds);
      traffic.firstByte(endpoint, seconds * 1000);
    },
    held(endpoint, seconds) {
      metrics.held(endpoint, seconds);
      traffic.count(endpoint, "held");
    },
    resumed(endpoint, seconds) {
      metrics.resumed(endpoint, seconds);
      traffic.count(endpoint, "continued");
    },
    streamCut(endpoint, reason) {
      metrics.streamCut(endpoint, reason);
      traffic.count(endpoint, "cut");
    },
  };
}
