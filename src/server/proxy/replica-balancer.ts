import type { Socket } from "node:net";
import { Client, Pool, type Dispatcher } from "undici";
import type { RouteTarget } from "../../module.js";

// Least outstanding requests over an endpoint's ready replicas, counted in this process, with one
// keep-alive connection pool (undici's) per replica. Ties go round the list, so that an idle endpoint still
// spreads its requests.

interface Replica {
  pool: Pool;
  /** A connection to it was up once: a reset since may be an idle connection's, not the replica's fault. */
  connected: boolean;
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
 * A new connection to a replica must be up within this long. A machine gone from the network
 * drops the connection attempt silently, and the system's own limit is about two minutes.
 */
export const CONNECT_TIMEOUT_MS = 5_000;

/**
 * The pools' options. An idle connection is kept 4 s, or as a replica's `Keep-Alive: timeout=N`
 * says less one second (undici's defaults), so that no request goes out on one the replica is
 * closing. No header or body timeout of undici's: the proxy's first-byte and stall clocks are the
 * limits (a model may think for minutes), and the connect timeout is CONNECT_TIMEOUT_MS.
 */
const POOL_OPTIONS: Pool.Options = { connect: { timeout: CONNECT_TIMEOUT_MS }, headersTimeout: 0, bodyTimeout: 0, factory: clientFactory };

/**
 * A request that may need to drop its connection: told the connection of the client it went to.
 * undici's own abort leaves an aborted request at the head of its client's queue, which then opens
 * a new connection for nothing (a hung replica would get one per abandoned request); destroying
 * the connection with an error of our own fails that request and opens none.
 */
export interface ConnectionAware {
  connection?: () => Socket | undefined;
}

/** undici's clients, each told its connection, and telling the requests sent on it. */
function clientFactory(origin: URL, options: object): Dispatcher {
  let socket: Socket | undefined;
  const connect = (options as { connect: (opts: object, callback: (err: Error | null, socket: Socket | null) => void) => void }).connect;
  const client = new Client(origin, {
    ...options,
    connect: (opts, callback) =>
      connect(opts, (err, made) => {
        if (made !== null) socket = made;
        (callback as (err: Error | null, socket: Socket | null) => void)(err, made);
      }),
  } as Client.Options);
  const dispatch = client.dispatch.bind(client);
  const connection = () => socket;
  client.dispatch = (opts, handler) => {
    (handler as ConnectionAware).connection = connection;
    return dispatch(opts, handler);
  };
  return client;
}

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
      const count = this.loadAt(target, now);
      if (count < bestCount) {
        best = target;
        bestCount = count;
      }
    }
    return best;
  }

  /** Each of `targets`' requests in flight from this process, a shunned replica's raised past any other's. */
  loads(targets: readonly RouteTarget[]): number[] {
    const now = Date.now();
    // A plain loop: on a request's way, less code than map's with its callback.
    const loads = new Array<number>(targets.length);
    for (let i = 0; i < targets.length; i++) loads[i] = this.loadAt(targets[i]!, now);
    return loads;
  }

  private loadAt(target: RouteTarget, now: number): number {
    const replica = this.replicas.get(targetKey(target));
    return replica === undefined ? 0 : replica.outstanding + (replica.shunnedUntil > now ? SHUNNED_WEIGHT : 0);
  }

  /** Counts a request to `target` as outstanding and returns the pool to send it on (`origin`: the replica URL's). */
  begin(target: RouteTarget, origin: string): Pool {
    const now = Date.now();
    if (now - this.lastSweep > SWEEP_EVERY_MS) this.sweep(now);
    let replica = this.replicas.get(targetKey(target));
    if (replica === undefined) {
      const made: Replica = { pool: new Pool(origin, POOL_OPTIONS), connected: false, outstanding: 0, lastUsed: now, shunnedUntil: 0 };
      made.pool.once("connect", () => (made.connected = true));
      replica = made;
      this.replicas.set(targetKey(target), replica);
    }
    replica.outstanding += 1;
    replica.lastUsed = now;
    return replica.pool;
  }

  /** Whether a connection to `target` was ever up. */
  connected(target: RouteTarget): boolean {
    return this.replicas.get(targetKey(target))?.connected ?? false;
  }

  /** The request to `target` is over (answered, failed or abandoned). */
  end(target: RouteTarget): void {
    const replica = this.replicas.get(targetKey(target));
    if (replica !== undefined) replica.outstanding -= 1;
  }

  /** `target` could not be connected to: pass it over for SHUN_MS while others can serve. */
  shun(target: RouteTarget): void {
    const replica = this.replicas.get(targetKey(target));
    if (replica !== undefined) replica.shunnedUntil = Date.now() + SHUN_MS;
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [name, replica] of this.replicas) {
      if (replica.outstanding === 0 && now - replica.lastUsed > IDLE_POOL_MS) {
        replica.pool.destroy().catch(() => undefined);
        this.replicas.delete(name);
      }
    }
  }
}

/**
 * Each target's key, made once: the directory keeps an answer (its targets) about a second, and
 * every request looks its replicas up by key, a few times over.
 */
const keys = new WeakMap<RouteTarget, string>();

/** A replica is its instance at its address: a machine that came back on another port is another pool, and another cache. */
export function targetKey(target: RouteTarget): string {
  let key = keys.get(target);
  if (key === undefined) keys.set(target, (key = `${target.instanceId} ${target.url}`));
  return key;
}
