import type { BlockHashes } from "./prompt-blocks.js";

// The block hashes one replica was sent, most recently sent first: a bounded LRU with a time to
// live. A prompt's blocks are touched last block first, so that its first block is the most
// recent of them; and a block's hash names its whole prefix, so whoever touched block k touched
// blocks 0..k-1 with it. Hence, but for hash collisions, a replica that holds block k holds every
// block before it: eviction and expiry take a prompt's tail before its head, as vLLM evicts a
// sequence's last blocks first, and the longest prefix held is found by binary search.
//
// The recency list is kept in typed arrays (slots linked both ways) beside a map from hash to
// slot: a Map's own insertion order would serve, but its deleted entries stay in place until it
// rehashes, and reaching its oldest entry walks over all of them.

const NONE = -1;

export class ReplicaBlocks {
  private readonly slotOf = new Map<number, number>();
  private hashAt = new Int32Array(0);
  private timeAt = new Float64Array(0);
  /** Towards the more recent slot, and towards the less recent. */
  private newer = new Int32Array(0);
  private older = new Int32Array(0);
  /** The most and the least recently sent. */
  private head = NONE;
  private tail = NONE;
  /** Slots given back by expiry, taken before new ones. */
  private readonly free: number[] = [];
  private used = 0;

  constructor(
    private readonly maxBlocks: number,
    private readonly ttlMs: number,
  ) {}

  get size(): number {
    return this.slotOf.size;
  }

  /**
   * Records `blocks` as sent now, then drops the expired; past maxBlocks the least recent make
   * room. As if each were touched, the last block first: the prompt's blocks become the most
   * recent, in its order. Those that already are (the prompt's start sent last time: a shared
   * system prompt, the conversation so far) only have their time set; the rest are placed after them.
   */
  learn(blocks: BlockHashes, now: number): void {
    // More than maxBlocks: the first ones would push the rest out.
    const n = Math.min(blocks.length, this.maxBlocks);
    let b = 0;
    let previous = NONE;
    for (let slot = this.head; b < n && slot !== NONE && this.hashAt[slot] === blocks[b]; slot = this.older[slot]!, b++) {
      this.timeAt[slot] = now;
      previous = slot;
    }
    for (; b < n; b++) previous = this.place(blocks[b]!, now, previous);
    this.expire(now);
  }

  /** Drops the expired blocks (the least recent come first). */
  expire(now: number): void {
    while (this.tail !== NONE && now - this.timeAt[this.tail]! >= this.ttlMs) {
      const slot = this.tail;
      this.unlink(slot);
      this.slotOf.delete(this.hashAt[slot]!);
      this.free.push(slot);
    }
  }

  /** How many of `blocks`' first blocks this replica holds, unexpired. */
  prefixHeld(blocks: BlockHashes, now: number): number {
    // The largest k with block k-1 held: held blocks form a prefix (see above).
    let low = 0;
    let high = blocks.length;
    while (low < high) {
      const mid = (low + high + 1) >>> 1;
      if (this.holds(blocks[mid - 1]!, now)) low = mid;
      else high = mid - 1;
    }
    return low;
  }

  private holds(hash: number, now: number): boolean {
    const slot = this.slotOf.get(hash);
    return slot !== undefined && now - this.timeAt[slot]! < this.ttlMs;
  }

  /**
   * `hash` sent now, placed just less recent than slot `after` (NONE: the most recent); its slot.
   * The fewer than maxBlocks slots placed before it in this learn are more recent than any other,
   * so a slot taken from the least recent is never one of them.
   */
  private place(hash: number, now: number, after: number): number {
    let slot = this.slotOf.get(hash);
    if (slot === after && slot !== undefined) {
      // The same hash twice in a row (a collision): it is where it should be.
      this.timeAt[slot] = now;
      return slot;
    }
    if (slot !== undefined) this.unlink(slot);
    else {
      slot = this.newSlot();
      this.hashAt[slot] = hash;
      this.slotOf.set(hash, slot);
    }
    this.timeAt[slot] = now;
    const next = after === NONE ? this.head : this.older[after]!;
    this.newer[slot] = after;
    this.older[slot] = next;
    if (after === NONE) this.head = slot;
    else this.older[after] = slot;
    if (next === NONE) this.tail = slot;
    else this.newer[next] = slot;
    return slot;
  }

  /** A free slot: one given back, a new one while under maxBlocks, else the least recent's. */
  private newSlot(): number {
    const freed = this.free.pop();
    if (freed !== undefined) return freed;
    if (this.used < this.maxBlocks) {
      if (this.used === this.hashAt.length) this.grow();
      return this.used++;
    }
    const slot = this.tail;
    this.unlink(slot);
    this.slotOf.delete(this.hashAt[slot]!);
    return slot;
  }

  private unlink(slot: number): void {
    const newer = this.newer[slot]!;
    const older = this.older[slot]!;
    if (newer !== NONE) this.older[newer] = older;
    else this.head = older;
    if (older !== NONE) this.newer[older] = newer;
    else this.tail = newer;
  }

  /** Doubles the slots, up to maxBlocks: a replica sent little takes little. */
  private grow(): void {
    const size = Math.min(this.maxBlocks, Math.max(64, this.hashAt.length * 2));
    const widen = <T extends Int32Array | Float64Array>(from: T, to: T): T => (to.set(from), to);
    this.hashAt = widen(this.hashAt, new Int32Array(size));
    this.timeAt = widen(this.timeAt, new Float64Array(size));
    this.newer = widen(this.newer, new Int32Array(size));
    this.older = widen(this.older, new Int32Array(size));
  }
}
