import type { BlockHashes } from "./prompt-blocks.js";
import { ReplicaBlocks } from "./replica-blocks.js";

// The prefix index (SPEC.md section 2, "Requests that share a prompt go where it is cached"): per
// endpoint and replica, the prompt blocks this process sent there (replica-blocks.ts), learned
// from its own routing, and "which replica holds how much of this prompt". Pure: no HTTP, no
// clock of its own. Memory is bounded whatever the traffic: at most maxBlocks per replica, and
// replicas are dropped when they leave routing (`replicas` is given those in it) or hold nothing
// unexpired (a sweep every SWEEP_EVERY_MS, which also forgets endpoints that no longer route).
//
// A request asks about the replicas its endpoint routes to now, as one directory answer lists
// them; the answer is kept about a second, so most requests share it. Their blocks are found by
// name once per answer (IndexedReplicas), not on each request: a request's lookups are only those
// of its blocks.

const SWEEP_EVERY_MS = 60_000;

export interface PrefixIndexOptions {
  /** Blocks kept per replica; the least recently sent go first. */
  maxBlocks: number;
  /** A block not sent again for this long is forgotten, ms. */
  ttlMs: number;
  /** The clock, ms. */
  now?: () => number;
}

/** Replicas of one endpoint, in a directory answer's order, with their blocks: good while the index has not dropped a replica since (`generation`). */
export class IndexedReplicas {
  constructor(
    readonly endpoint: string,
    readonly names: readonly string[],
    /** Each one's blocks, as names orders them. */
    readonly own: readonly ReplicaBlocks[],
    readonly generation: number,
  ) {}
}

export class PrefixIndex {
  /** Endpoint -> replica -> its blocks. */
  private readonly endpoints = new Map<string, Map<string, ReplicaBlocks>>();
  /** Endpoint -> the replicas it was last told to retain. */
  private readonly retained = new Map<string, readonly string[]>();
  /** Counts the times a replica's blocks were dropped: IndexedReplicas of an earlier count may name dropped ones. */
  private generation = 0;
  private readonly now: () => number;
  private lastSweep: number;

  constructor(private readonly options: PrefixIndexOptions) {
    this.now = options.now ?? Date.now;
    this.lastSweep = this.now();
  }

  /**
   * The blocks of `names`, the replicas `endpoint` routes to now; its other replicas are forgotten
   * (their caches are gone or going). `known`: what this returned before for the same list, given
   * back while still good.
   */
  replicas(endpoint: string, names: readonly string[], known?: IndexedReplicas): IndexedReplicas {
    const now = this.now();
    if (now - this.lastSweep >= SWEEP_EVERY_MS) this.sweep(now);
    if (known !== undefined && known.generation === this.generation && known.endpoint === endpoint) return known;
    this.retain(endpoint, names);
    let replicas = this.endpoints.get(endpoint);
    if (replicas === undefined) this.endpoints.set(endpoint, (replicas = new Map()));
    const own = names.map((name) => {
      let blocks = replicas.get(name);
      if (blocks === undefined) replicas.set(name, (blocks = new ReplicaBlocks(this.options.maxBlocks, this.options.ttlMs)));
      return blocks;
    });
    return new IndexedReplicas(endpoint, names, own, this.generation);
  }

  /** For each of `replicas`, how many of `blocks`' first blocks it holds. */
  held(replicas: IndexedReplicas, blocks: BlockHashes): number[] {
    const now = this.now();
    const { own } = replicas;
    const held = new Array<number>(own.length);
    for (let i = 0; i < own.length; i++) held[i] = own[i]!.prefixHeld(blocks, now);
    return held;
  }

  /**
   * `blocks` were sent to the replica at `at` of `replicas`: it holds them from now on. `held`:
   * what held() said that replica holds of them, asked just before (its lookups not made again).
   */
  learn(replicas: IndexedReplicas, at: number, blocks: BlockHashes, held?: number): void {
    if (blocks.length > 0) replicas.own[at]!.learn(blocks, this.now(), held);
  }

  /** Blocks held, all endpoints and replicas together. */
  get size(): number {
    let blocks = 0;
    for (const replicas of this.endpoints.values()) for (const own of replicas.values()) blocks += own.size;
    return blocks;
  }

  /** Forgets every replica of `endpoint` but `names`. The same list (the same array) as last time changes nothing. */
  private retain(endpoint: string, names: readonly string[]): void {
    if (this.retained.get(endpoint) === names) return;
    this.retained.set(endpoint, names);
    const known = this.endpoints.get(endpoint);
    if (known === undefined) return;
    for (const replica of known.keys()) if (!names.includes(replica)) this.drop(known, replica);
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [endpoint, replicas] of this.endpoints) {
      for (const [replica, own] of replicas) {
        own.expire(now);
        if (own.size === 0) this.drop(replicas, replica);
      }
      if (replicas.size === 0) this.endpoints.delete(endpoint);
    }
    for (const endpoint of this.retained.keys()) if (!this.endpoints.has(endpoint)) this.retained.delete(endpoint);
  }

  private drop(replicas: Map<string, ReplicaBlocks>, replica: string): void {
    replicas.delete(replica);
    this.generation++;
  }
}
