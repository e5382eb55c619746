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

  /** Records `blocks` as sent now, then drops the expired; past maxBlocks the least recent make room. */
  learn(blocks: Int32Array, now: number): void {
    for (let b = blocks.length - 1; b >= 0; b--) this.touch(blocks[b]!, now);
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
  prefixHeld(blocks: Int32Array, now: number): number {
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

  private touch(hash: number, now: number): void {
    let slot = this.slotOf.get(hash);
    if (slot !== undefined) this.unlink(slot);
    else {
      slot = this.newSlot();
      this.hashAt[slot] = hash;
      this.slotOf.set(hash, slot);
    }
    this.timeAt[slot] = now;
    this.older[slot] = this.head;
    this.newer[slot] = NONE;
    if (this.head !== NONE) this.newer[this.head] = slot;
    this.head = slot;
    if (this.tail === NONE) this.tail = slot;
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
