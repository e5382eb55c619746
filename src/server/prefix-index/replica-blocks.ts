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
//
// A prompt sent again within refreshMs of its held part's last sending (a hundredth of the time to
// live, at most a second) is not walked again: its held part keeps its place and its time, and only
// the blocks past it are placed, just after it and as recent as it (while the replica has room for
// them; else the prompt is learned whole, as above). A chat's every turn resends the conversation
// so far: its learning costs what is new in it, not the whole prompt again. The list stays ordered
// by time, a held part is refreshed at least every refreshMs while it is sent, and a block may be
// forgotten up to refreshMs before its time to live.

const NONE = -1;
/** A prompt's held part is walked again (made the most recent, its time now) at most this often: a fraction of the time to live, at most a second. */
export const refreshMsOf = (ttlMs: number): number => Math.min(1_000, ttlMs / 100);

export class ReplicaBlocks {
  private readonly slotOf = new Map<number, number>();
  private hashAt = new Int32Array(0);
  private timeAt = new Float64Array(0);
  /** Towards the more recent slot, and towards the less recent. */
  private newer = new Int32Array(0);
  private older = new Int32Array(0);
  /** The learn that last placed each slot (learns' count). */
  private markAt = new Int32Array(0);
  private learns = 0;
  /** The most and the least recently sent. */
  private head = NONE;
  private tail = NONE;
  /** Slots given back by expiry, taken before new ones. */
  private readonly free: number[] = [];
  private used = 0;

  private readonly refreshMs: number;

  constructor(
    private readonly maxBlocks: number,
    private readonly ttlMs: number,
  ) {
    this.refreshMs = refreshMsOf(ttlMs);
  }

  get size(): number {
    return this.slotOf.size;
  }

  /**
   * Records `blocks` as sent now, then drops the expired; past maxBlocks the least recent make
   * room. As if each were touched, the last block first: the prompt's blocks become the most
   * recent, in its order, and the others keep theirs. A prompt learned before lies in the list as
   * a run, its blocks one after the other: a run found is moved whole, one lookup for all of it.
   * A prompt whose held part was sent within refreshMs keeps that part as it is (above).
   * `held`: prefixHeld(blocks) at `now`, when the caller has just asked it (not asked again).
   */
  learn(blocks: BlockHashes, now: number, held?: number): void {
    // More than maxBlocks: the first ones would push the rest out.
    const n = Math.min(blocks.length, this.maxBlocks);
    // Slots placed by this learn carry its mark: a block met twice (a collision) is not moved again.
    // (An int32 that wraps round as the marks kept do.)
    const mark = (this.learns = (this.learns + 1) | 0);
    let previous = NONE;
    let b = 0;
    let time = now;
    // Its held part sent a moment ago: the blocks past it go just after it, as recent as it (above).
    if (n === blocks.length) held ??= this.prefixHeld(blocks, now);
    else held = 0;
    if (held > 0 && this.free.length + this.maxBlocks - this.used >= n - held) {
      // A count given by the caller is trusted only this far: its last block found, sent within refreshMs.
      const last = this.slotOf.get(blocks[held - 1]!);
      if (last !== undefined && now - this.timeAt[last]! < this.refreshMs) {
        this.markAt[last] = mark;
        previous = last;
        b = held;
        time = this.timeAt[last]!;
      }
    }
    while (b < n) {
      const first = this.slotOf.get(blocks[b]!);
      if (first === undefined || this.markAt[first] === mark) {
        if (first === undefined) previous = this.placeNew(blocks[b]!, time, previous);
        b++;
        continue;
      }
      // The run from `first`: the following blocks, in order, towards the less recent; each
      // marked and sent at `time` as it is found.
      let last = first;
      const { older, hashAt, markAt, timeAt } = this;
      markAt[first] = mark;
      timeAt[first] = time;
      for (b++; b < n; b++) {
        const next = older[last]!;
        if (next === NONE || hashAt[next] !== blocks[b] || markAt[next] === mark) break;
        markAt[next] = mark;
        timeAt[next] = time;
        last = next;
      }
      if (this.newer[first] !== previous) {
        this.unlinkRun(first, last);
        this.linkRunAfter(first, last, previous);
      }
      previous = last;
    }
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
    // The largest k with block k-1 held: held blocks form a prefix (see above). Most replicas
    // hold none of a prompt, and its own replica most often all of it: one or two lookups.
    const n = blocks.length;
    if (n === 0 || !this.holds(blocks[0]!, now)) return 0;
    if (this.holds(blocks[n - 1]!, now)) return n;
    let low = 1;
    let high = n - 1;
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
   * A block not held, sent at `time`, placed just less recent than slot `after` (NONE: the most
   * recent); its slot. In a learn from the front, the fewer than maxBlocks slots placed before it
   * are more recent than any other, so a slot taken from the least recent is never one of them; a
   * learn after a held part runs only while there is room for its new blocks, and evicts none.
   */
  private placeNew(hash: number, time: number, after: number): number {
    const slot = this.newSlot();
    this.hashAt[slot] = hash;
    this.timeAt[slot] = time;
    this.markAt[slot] = this.learns;
    this.slotOf.set(hash, slot);
    this.linkRunAfter(slot, slot, after);
    return slot;
  }

  /** Takes the run of slots `first`..`last` (towards the less recent) out of the list. */
  private unlinkRun(first: number, last: number): void {
    const newer = this.newer[first]!;
    const older = this.older[last]!;
    if (newer !== NONE) this.older[newer] = older;
    else this.head = older;
    if (older !== NONE) this.newer[older] = newer;
    else this.tail = newer;
  }

  /** Puts the run `first`..`last` just less recent than slot `after` (NONE: the most recent). */
  private linkRunAfter(first: number, last: number, after: number): void {
    const next = after === NONE ? this.head : this.older[after]!;
    this.newer[first] = after;
    this.older[last] = next;
    if (after === NONE) this.head = first;
    else this.older[after] = first;
    if (next === NONE) this.tail = last;
    else this.newer[next] = last;
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
    this.unlinkRun(slot, slot);
  }

  /** Doubles the slots, up to maxBlocks: a replica sent little takes little. */
  private grow(): void {
    const size = Math.min(this.maxBlocks, Math.max(64, this.hashAt.length * 2));
    const widen = <T extends Int32Array | Float64Array>(from: T, to: T): T => (to.set(from), to);
    this.hashAt = widen(this.hashAt, new Int32Array(size));
    this.timeAt = widen(this.timeAt, new Float64Array(size));
    this.newer = widen(this.newer, new Int32Array(size));
    this.older = widen(this.older, new Int32Array(size));
    this.markAt = widen(this.markAt, new Int32Array(size));
  }
}
