// The block hashes one replica was sent, most recently sent last: a bounded LRU with a time to
// live. A prompt's blocks are touched last block first, so that its first block is the most
// recent of them; and a block's hash names its whole prefix, so whoever touched block k touched
// blocks 0..k-1 with it. Hence, but for hash collisions, a replica that holds block k holds every
// block before it: eviction and expiry take a prompt's tail before its head, as vLLM evicts a
// sequence's last blocks first, and the longest prefix held is found by binary search.

export class ReplicaBlocks {
  /** Hash -> when it was last sent (ms), in the order of that time: a Map iterates as inserted. */
  private readonly touched = new Map<number, number>();

  constructor(
    private readonly maxBlocks: number,
    private readonly ttlMs: number,
  ) {}

  get size(): number {
    return this.touched.size;
  }

  /** Records `blocks` as sent now, then evicts the least recent past maxBlocks and the expired. */
  learn(blocks: Int32Array, now: number): void {
    for (let b = blocks.length - 1; b >= 0; b--) {
      const hash = blocks[b]!;
      this.touched.delete(hash);
      this.touched.set(hash, now);
    }
    let over = this.touched.size - this.maxBlocks;
    for (const [hash, at] of this.touched) {
      if (over <= 0 && now - at < this.ttlMs) break;
      this.touched.delete(hash);
      over -= 1;
    }
  }

  /** Drops the expired blocks (the oldest come first). */
  expire(now: number): void {
    for (const [hash, at] of this.touched) {
      if (now - at < this.ttlMs) break;
      this.touched.delete(hash);
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
    const at = this.touched.get(hash);
    return at !== undefined && now - at < this.ttlMs;
  }
}
