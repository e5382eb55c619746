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
  /** Until then the replica is passed over while another can take the request. */
  shunnedUntil: number;
}

/**
 * How long a replica that could not be connected to is passed over: until the endpoint
 * controller's probes take it out of routing, requests need not each find out again.
 */
export const SHUN_MS = 5_000;
// Added to a shunned replica's count: it is chosen only when every other one is shunned too.
const SHUNNED_WEIGHT = 1e9;

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

  /**
   * The ready replica with the fewest requests in flight, other than `except`, passing over
   * shunned ones while another is left; undefined when none.
   */
  pick(targets: readonly RouteTarget[], except?: RouteTarget): RouteTarget | undefined {
    const n = targets.length;
    const start = this.turn++ % n;
    const now = Date.now();
    let best: RouteTarget | undefined;
    let bestCount = Infinity;
    for (let i = 0; i < n; i++) {
      const target = targets[(start + i) % n]!;
      if (except !== undefined && target.instanceId === except.instanceId) continue;
      const replica = this.replicas.get(key(target));
      const count = replica === undefined ? 0 : replica.outstanding + (replica.shunnedUntil > now ? SHUNNED_WEIGHT : 0);
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
      replica = { agent: secure ? new HttpsAgent(pool) : new Agent(pool), outstanding: 0, lastUsed: now, shunnedUntil: 0 };
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

  /** `target` could not be connected to: pass it over for SHUN_MS while others can serve. */
  shun(target: RouteTarget): void {
    const replica = this.replicas.get(key(target));
    if (replica !== undefined) replica.shunnedUntil = Date.now() + SHUN_MS;
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
