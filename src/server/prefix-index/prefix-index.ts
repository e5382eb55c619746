import type { BlockHashes } from "./prompt-blocks.js";
import { ReplicaBlocks } from "./replica-blocks.js";

// The prefix index (SPEC.md section 2, "Requests that share a prompt go where it is cached"): per
// endpoint and replica, the prompt blocks this process sent there (replica-blocks.ts), learned
// from its own routing, and "which replica holds how much of this prompt". Pure: no HTTP, no
// clock of its own. Memory is bounded whatever the traffic: at most maxBlocks per replica, and
// replicas are dropped when they leave routing (`retain`) or hold nothing unexpired (a sweep every
// SWEEP_EVERY_MS, which also forgets endpoints that no longer route).

const SWEEP_EVERY_MS = 60_000;

export interface PrefixIndexOptions {
  /** Blocks kept per replica; the least recently sent go first. */
  maxBlocks: number;
  /** A block not sent again for this long is forgotten, ms. */
  ttlMs: number;
  /** The clock, ms. */
  now?: () => number;
}

export class PrefixIndex {
  /** Endpoint -> replica -> its blocks. */
  private readonly endpoints = new Map<string, Map<string, ReplicaBlocks>>();
  /** Endpoint -> the replicas it was last told to retain. */
  private readonly retained = new Map<string, readonly string[]>();
  private readonly now: () => number;
  private lastSweep: number;

  constructor(private readonly options: PrefixIndexOptions) {
    this.now = options.now ?? Date.now;
    this.lastSweep = this.now();
  }

  /** For each of `replicas`, how many of `blocks`' first blocks it holds. */
  held(endpoint: string, replicas: readonly string[], blocks: BlockHashes): number[] {
    const known = this.endpoints.get(endpoint);
    const now = this.now();
    return replicas.map((replica) => known?.get(replica)?.prefixHeld(blocks, now) ?? 0);
  }

  /** `blocks` were sent to `replica`: it holds them from now on. */
  learn(endpoint: string, replica: string, blocks: BlockHashes): void {
    const now = this.now();
    if (now - this.lastSweep >= SWEEP_EVERY_MS) this.sweep(now);
    if (blocks.length === 0) return;
    let replicas = this.endpoints.get(endpoint);
    if (replicas === undefined) this.endpoints.set(endpoint, (replicas = new Map()));
    let own = replicas.get(replica);
    if (own === undefined) replicas.set(replica, (own = new ReplicaBlocks(this.options.maxBlocks, this.options.ttlMs)));
    own.learn(blocks, now);
  }

  /**
   * Forgets every replica of `endpoint` but `replicas` (those in routing now): the others' caches
   * are gone or going. The same list (the same array) as last time changes nothing.
   */
  retain(endpoint: string, replicas: readonly string[]): void {
    if (this.retained.get(endpoint) === replicas) return;
    this.retained.set(endpoint, replicas);
    const known = this.endpoints.get(endpoint);
    if (known === undefined) return;
    for (const replica of known.keys()) if (!replicas.includes(replica)) known.delete(replica);
    if (known.size === 0) this.endpoints.delete(endpoint);
  }

  /** Blocks held, all endpoints and replicas together. */
  get size(): number {
    let blocks = 0;
    for (const replicas of this.endpoints.values()) for (const own of replicas.values()) blocks += own.size;
    return blocks;
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [endpoint, replicas] of this.endpoints) {
      for (const [replica, own] of replicas) {
        own.expire(now);
        if (own.size === 0) replicas.delete(replica);
      }
      if (replicas.size === 0) this.endpoints.delete(endpoint);
    }
    for (const endpoint of this.retained.keys()) if (!this.endpoints.has(endpoint)) this.retained.delete(endpoint);
  }
}
