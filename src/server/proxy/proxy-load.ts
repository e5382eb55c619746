import type { ProxyLoad, ProxyLoadEntry } from "../../module.js";

// The proxy's requests in flight and held, per endpoint, in this process, and each caller's answers
// in flight (held ones included) per endpoint: counted here as they come and go, read by the GPU
// module's load publisher (module.ts, ProxyLoad).

interface Counts {
  inFlight: number;
  held: number;
  byReplica: Map<string, number>;
  byCaller: Map<string, number>;
  /** Date.now() ms of the last request, null before any. */
  lastRequestAt: number | null;
  /** Last change of any count, ms: an endpoint whose load just ended is still published a while, so its zero is written. */
  changedAt: number;
}

export function createProxyLoad(): ProxyLoad {
  const endpoints = new Map<string, Counts>();
  const countsOf = (endpointId: string): Counts => {
    let counts = endpoints.get(endpointId);
    if (counts === undefined) {
      counts = { inFlight: 0, held: 0, byReplica: new Map(), byCaller: new Map(), lastRequestAt: null, changedAt: Date.now() };
      endpoints.set(endpointId, counts);
    }
    return counts;
  };
  return {
    arrived(endpointId) {
      const counts = countsOf(endpointId);
      counts.changedAt = counts.lastRequestAt = Date.now();
    },
    held(endpointId, delta) {
      const counts = countsOf(endpointId);
      counts.held += delta;
      counts.changedAt = Date.now();
    },
    sent(endpointId, instanceId, delta) {
      const counts = countsOf(endpointId);
      counts.inFlight += delta;
      add(counts.byReplica, instanceId, delta);
      counts.changedAt = Date.now();
    },
    callerAnswer(endpointId, caller, delta) {
      const counts = countsOf(endpointId);
      add(counts.byCaller, caller, delta);
      counts.changedAt = Date.now();
    },
    entries(recentMs) {
      const now = Date.now();
      const entries: ProxyLoadEntry[] = [];
      for (const [endpointId, c] of endpoints) {
        const busy = c.inFlight !== 0 || c.held !== 0 || c.byCaller.size > 0;
        if (!busy && now - c.changedAt >= recentMs) {
          // Quiet long enough to have been published at zero: forgotten (endpoints come and go).
          endpoints.delete(endpointId);
          continue;
        }
        entries.push({ endpointId, inFlight: c.inFlight, held: c.held, byReplica: Object.fromEntries(c.byReplica), byCaller: Object.fromEntries(c.byCaller), lastRequestAt: c.lastRequestAt === null ? null : new Date(c.lastRequestAt) });
      }
      return entries;
    },
  };
}

/** Adds `delta` to `key`'s count; a count back at zero leaves the map. */
function add(counts: Map<string, number>, key: string, delta: number): void {
  const now = (counts.get(key) ?? 0) + delta;
  if (now === 0) counts.delete(key);
  else counts.set(key, now);
}
