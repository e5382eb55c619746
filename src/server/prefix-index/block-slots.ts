// A replica's map from block hash to the slot it is kept in (replica-blocks.ts), as one typed
// array: open addressing with linear probing, each entry a hash and its slot side by side, at most
// half full. A lookup reads one entry most often, where a Map reads its bucket, then its entry, in
// two places: on a request's way the index's memory has most often left the CPU's caches, so each
// place read costs a trip to memory, and held() looks up several replicas.

const EMPTY = 0;

export class BlockSlots {
  /** Entry i: its hash at 2i, its slot + 1 at 2i + 1 (EMPTY: no entry). */
  private entries: Int32Array;
  private mask: number;
  /** The top bits of a hash's Fibonacci product pick its home entry. */
  private shift: number;
  private count = 0;

  constructor(capacity: number) {
    const size = tableSize(capacity);
    this.entries = new Int32Array(2 * size);
    this.mask = size - 1;
    this.shift = 32 - Math.log2(size);
  }

  get size(): number {
    return this.count;
  }

  /** The slot of `hash`, or -1. */
  get(hash: number): number {
    const { entries, mask } = this;
    for (let i = this.home(hash); ; i = (i + 1) & mask) {
      const slot = entries[2 * i + 1]!;
      if (slot === EMPTY) return -1;
      if (entries[2 * i] === hash) return slot - 1;
    }
  }

  /** Puts `hash` at `slot` (it must not be there already); past capacity, grows first. */
  set(hash: number, slot: number): void {
    if (2 * (this.count + 1) > this.mask + 1) this.rehash(2 * (this.mask + 1));
    this.place(hash, slot);
    this.count++;
  }

  delete(hash: number): void {
    const { entries, mask } = this;
    let i = this.home(hash);
    for (; ; i = (i + 1) & mask) {
      if (entries[2 * i + 1] === EMPTY) return;
      if (entries[2 * i] === hash) break;
    }
    this.count--;
    // Backward shift: a later entry of the cluster whose home is not past the gap (cyclically, in
    // gap..it) moves into the gap, so that no lookup of it stops at the gap first.
    for (let j = (i + 1) & mask; entries[2 * j + 1] !== EMPTY; j = (j + 1) & mask) {
      const home = this.home(entries[2 * j]!);
      const staysPut = i <= j ? home > i && home <= j : home > i || home <= j;
      if (staysPut) continue;
      entries[2 * i] = entries[2 * j]!;
      entries[2 * i + 1] = entries[2 * j + 1]!;
      i = j;
    }
    entries[2 * i + 1] = EMPTY;
  }

  private home(hash: number): number {
    return Math.imul(hash, 0x9e3779b9) >>> this.shift;
  }

  private place(hash: number, slot: number): void {
    const { entries, mask } = this;
    let i = this.home(hash);
    while (entries[2 * i + 1] !== EMPTY) i = (i + 1) & mask;
    entries[2 * i] = hash;
    entries[2 * i + 1] = slot + 1;
  }

  private rehash(size: number): void {
    const old = this.entries;
    this.entries = new Int32Array(2 * size);
    this.mask = size - 1;
    this.shift = 32 - Math.log2(size);
    for (let i = 1; i < old.length; i += 2) if (old[i] !== EMPTY) this.place(old[i - 1]!, old[i]! - 1);
  }
}

/** Entries for `capacity` hashes at most half full: a power of two, at least 64. */
function tableSize(capacity: number): number {
  let size = 64;
  while (size < 2 * capacity) size *= 2;
  return size;
}
