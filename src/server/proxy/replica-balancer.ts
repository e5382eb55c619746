import { Agent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import type { RouteTarget } from "../../module.js";

// Least outstanding requests over an endpoint's ready replicas, counted in this process, with one
// keep-alive connection pool per replica. Ties go round the list, so that an idle endpoint still
// spreads its requests.

interface Replica {
  agent: Agent;
  outstanding: number;
  lastUsed: number;
}

/** A pool unused this long (its replica left routing, most likely) is closed. */
const IDLE_POOL_MS = 10 * 60_000;
const SWEEP_EVERY_MS = 60_000;
/**
 * Socket timeout of the pools: Node then honours a replica's `Keep-Alive: timeout=N` hint and
 * drops an idle connection a second before the replica would, instead of sending a request on it.
 */
const SOCKET_TIMEOUT_MS = 120_000;

export class ReplicaBalancer {
  private readonly replicas = new Map<string, Replica>();
  private turn = 0;
  private lastSweep = Date.now();

  /** The ready replica with the fewest requests in flight, other than `except`; undefined when none. */
  pick(targets: readonly RouteTarget[], except?: RouteTarget): RouteTarget | undefined {
    const n = targets.length;
    const start = this.turn++ % n;
    let best: RouteTarget | undefined;
    let bestCount = Infinity;
    for (let i = 0; i < n; i++) {
      const target = targets[(start + i) % n]!;
      if (except !== undefined && target.instanceId === except.instanceId) continue;
      const count = this.replicas.get(key(target))?.outstanding ?? 0;
      if (count < bestCount) {
        best = target;
        bestCount = count;
      }
    }
    return best;
  }

  /** Counts a request to `target` as outstanding and returns the pool to send it on. */
  begin(target: RouteTarget, secure: boolean): Agent {
    const now = Date.now();
    if (now - this.lastSweep > SWEEP_EVERY_MS) this.sweep(now);
    let replica = this.replicas.get(key(target));
    if (replica === undefined) {
      const pool = { keepAlive: true, scheduling: "lifo", timeout: SOCKET_TIMEOUT_MS } as const;
      replica = { agent: secure ? new HttpsAgent(pool) : new Agent(pool), outstanding: 0, lastUsed: now };
      this.replicas.set(key(target), replica);
    }
    replica.outstanding += 1;
    replica.lastUsed = now;
    return replica.agent;
  }

  /** The request to `target` is over (answered, failed or abandoned). */
  end(target: RouteTarget): void {
    const replica = this.replicas.get(key(target));
    if (replica !== undefined) replica.outstanding -= 1;
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [name, replica] of this.replicas) {
      if (replica.outstanding === 0 && now - replica.lastUsed > IDLE_POOL_MS) {
        replica.agent.destroy();
        this.replicas.delete(name);
      }
    }
  }
}

// A replica is its instance at its address: a machine that came back on another port is another pool.
function key(target: RouteTarget): string {
  return `${target.instanceId} ${target.url}`;
}
