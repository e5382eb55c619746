import { BlockHasher, HASHER_STATE, type BlockHashes } from "./prompt-blocks.js";

// The messages of recent chat bodies, byte for byte, with the prompt hasher's state after each
// message (raw-prompt.ts reads them): a body whose messages begin with the same bytes as a
// remembered body's takes up the hasher where that body's state was saved after them, rather than
// hashing them again. A chat resends its whole conversation each turn, and apps put one system
// prompt in front of every request: most of a prompt's bytes were read a moment before.
//
// Exact: the reader's state after a message depends only on the bytes from the messages' `[` on,
// so the same bytes give the same state and the same blocks; and a body is remembered only once
// it was read whole (checked as JSON). Bounded: 256 bodies, each at most KEPT_BYTES and
// KEPT_MESSAGES of its messages (with their states and blocks, about 80 KiB: about 20 MiB in
// all). A body's key is a hash of its messages' first KEY_BYTES (a body with fewer is not
// remembered), its set two slots named by the key's top bits: two conversations whose keys share a
// set are both kept. A body replaces the one of its key unless it has no message past those it
// shares with it (the latest turn of a conversation is kept, and the next turn takes it up); a
// body of a new key replaces the less recently used of its set.

/** 128 sets of two slots: a set is the top SET_BITS of a key. */
const SET_BITS = 7;
/** Bytes that make a body's key: a chat's first message, most often its system prompt, begins there. */
const KEY_BYTES = 64;
/** Bytes of a body's messages kept at most: the messages ending past it are read as before. */
export const KEPT_BYTES = 64 * 1024;
/** A body's messages kept at most, each with its hasher's state: the rest are read as before. */
export const KEPT_MESSAGES = 128;

interface Remembered {
  /** The hash of its messages' first KEY_BYTES. */
  key: number;
  /** When it was last taken up or kept (RecentMessages' count of both). */
  used: number;
  /** A body's messages from just after their `[` to the end of the last message kept. */
  bytes: Buffer;
  /** Each message's end, an offset in `bytes`; the hasher's state after message i at states[i * HASHER_STATE]. */
  ends: Int32Array;
  states: Int32Array;
  /** The body's blocks up to its last state's. */
  blocks: BlockHashes;
}

/** One body's reading: the messages taken up from memory, and the ends and states of those read after them. */
export class MessagesTrace {
  readonly ends: number[] = [];
  readonly states: number[] = [];

  constructor(
    /** Where the body's messages begin: just after their `[`. */
    readonly from: number,
    /** Its key, and the slot it is kept in should it be. */
    readonly key: number,
    readonly slot: number,
    /** The body remembered in its slot, if any, and how many of its messages this body begins with. */
    readonly kept: Remembered | undefined,
    readonly taken: number,
  ) {}

  /** Where reading goes on: after the messages taken up, or `from`. */
  get at(): number {
    return this.taken === 0 ? this.from : this.from + this.kept!.ends[this.taken - 1]!;
  }

  /** A message of the body was read up to `at`, leaving `hasher` in its state. */
  ended(at: number, hasher: BlockHasher): void {
    if (at - this.from > KEPT_BYTES || this.taken + this.ends.length >= KEPT_MESSAGES) return;
    this.ends.push(at - this.from);
    hasher.saveState(this.states);
  }
}

export class RecentMessages {
  private readonly slots: Array<Remembered | undefined> = new Array<Remembered | undefined>(2 << SET_BITS).fill(undefined);
  private uses = 0;

  /** The hasher's block limit: a state saved under one limit is no use under another. */
  constructor(readonly maxBlocks: number) {}

  /**
   * The messages of `bytes` beginning at `from` (just after their `[`): `hasher` (fed nothing yet)
   * takes up the state after the longest run of a remembered body's messages they begin with;
   * undefined when the body is too short to be remembered.
   */
  recall(bytes: Buffer, from: number, hasher: BlockHasher): MessagesTrace | undefined {
    if (from + KEY_BYTES > bytes.length) return undefined;
    const key = keyOf(bytes, from);
    const slot = this.slotFor(key);
    const kept = this.slots[slot];
    const taken = kept?.key === key ? sharedMessages(kept, bytes, from) : 0;
    if (taken > 0) {
      kept!.used = ++this.uses;
      hasher.restoreState(kept!.states, (taken - 1) * HASHER_STATE, kept!.blocks);
    }
    return new MessagesTrace(from, key, slot, kept, taken);
  }

  /** The body `bytes`, read whole to `blocks` as `trace` says: kept, unless it has no message past those it took up. */
  remember(bytes: Buffer, trace: MessagesTrace, blocks: BlockHashes): void {
    if (trace.ends.length === 0) return;
    const { kept, taken } = trace;
    // Copies of their exact sizes: neither the request's buffer nor blocks past the last state are held.
    const ends = new Int32Array(taken + trace.ends.length);
    const states = new Int32Array(ends.length * HASHER_STATE);
    if (taken > 0) {
      ends.set(kept!.ends.subarray(0, taken));
      states.set(kept!.states.subarray(0, taken * HASHER_STATE));
    }
    ends.set(trace.ends, taken);
    states.set(trace.states, taken * HASHER_STATE);
    const blocksKept = BlockHasher.blocksOfState(states, states.length - HASHER_STATE);
    this.slots[trace.slot] = {
      key: trace.key,
      used: ++this.uses,
      bytes: Buffer.from(bytes.subarray(trace.from, trace.from + ends[ends.length - 1]!)),
      ends,
      states,
      blocks: blocks.slice(0, blocksKept),
    };
  }

  /** The slot of `key`'s set holding it; else the empty one, or the less recently used. */
  private slotFor(key: number): number {
    const first = (key >>> (32 - SET_BITS)) << 1;
    const a = this.slots[first];
    const b = this.slots[first + 1];
    if (a?.key === key) return first;
    if (b?.key === key) return first + 1;
    if (a === undefined) return first;
    if (b === undefined) return first + 1;
    return a.used <= b.used ? first : first + 1;
  }
}

/** The key of the messages beginning at `from`: a hash of their first KEY_BYTES, four bytes a step. */
function keyOf(bytes: Buffer, from: number): number {
  let hash = 0x811c9dc5 | 0;
  for (let i = from; i < from + KEY_BYTES; i += 4) hash = Math.imul(((hash << 5) | (hash >>> 27)) ^ (bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24)), 0x9e3779b9);
  // Its top bits name its set: a product's low bits depend only on its factors' low bits.
  return hash;
}

/** How many of `kept`'s messages the bytes from `from` begin with, byte for byte. */
function sharedMessages(kept: Remembered, bytes: Buffer, from: number): number {
  const count = kept.ends.length;
  // Most often all of them (the same prompt again, or its conversation's previous turn).
  if (sameMessages(kept, count, bytes, from)) return count;
  // The most, fewer than all, that are the same: a shared run is a prefix.
  let low = 0;
  let high = count - 1;
  while (low < high) {
    const mid = (low + high + 1) >>> 1;
    if (sameMessages(kept, mid, bytes, from)) low = mid;
    else high = mid - 1;
  }
  return low;
}

/** Whether the bytes from `from` begin with `kept`'s first `messages` messages (compared natively). */
function sameMessages(kept: Remembered, messages: number, bytes: Buffer, from: number): boolean {
  const end = kept.ends[messages - 1]!;
  return from + end <= bytes.length && bytes.compare(kept.bytes, 0, end, from, from + end) === 0;
}
