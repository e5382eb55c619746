// A prompt as the prefix index sees it (SPEC.md section 2, "Requests that share a prompt go where
// it is cached"): its text in order (a chat request's messages, roles and contents; a
// completion's prompt), cut in blocks of BLOCK_CHARS characters, each block named by a hash of
// everything up to its end. Two prompts share their first k block hashes exactly when they share
// their first k blocks of text (up to a 32-bit hash's collisions, which cost only a routing
// choice), as a model server's prefix cache shares its first k blocks of KV.

/**
 * Characters in a block: about 16 tokens of English, vLLM's KV block size. Only whole blocks are
 * hashed, as a model server caches only whole blocks; a shorter prompt has none.
 */
export const BLOCK_CHARS = 64;

/** What a request asks a model to read first: a chat's messages, or a completion's prompt. */
export type PromptKind = "chat" | "completions";

// Separators that a message's text cannot forge with an ordinary character.
export const ROLE_END = "\u0000";
export const MESSAGE_END = "\u0001";

/**
 * The prompt of a parsed request body, or undefined when it has none the index can read
 * (no messages list, no prompt): such a request is routed by load alone.
 */
export function promptOf(kind: PromptKind, body: Record<string, unknown>): string | undefined {
  if (kind === "completions") {
    const prompt = body.prompt;
    if (typeof prompt === "string") return prompt;
    // A batch of prompts or token ids: its text as JSON, equal for equal prompts.
    return Array.isArray(prompt) ? JSON.stringify(prompt) : undefined;
  }
  const messages = body.messages;
  if (!Array.isArray(messages)) return undefined;
  let text = "";
  for (const message of messages) {
    const { role, content } = (typeof message === "object" && message !== null ? message : {}) as { role?: unknown; content?: unknown };
    text += `${typeof role === "string" ? role : ""}${ROLE_END}${typeof content === "string" ? content : JSON.stringify(content ?? null)}${MESSAGE_END}`;
  }
  return text;
}

/**
 * The chained hashes of `text`'s whole blocks (BlockHasher): at most `maxBlocks` of them, as an
 * index that keeps no more per replica can use no more.
 */
export function blockHashes(text: string, maxBlocks = Infinity): Int32Array {
  const hasher = new BlockHasher(maxBlocks);
  hasher.addString(text);
  return hasher.blocks();
}

/**
 * The blocks of a parsed request's prompt: blockHashes(promptOf(kind, body)), its pieces hashed
 * where they lie rather than joined into one string first.
 */
export function promptBlocks(kind: PromptKind, body: Record<string, unknown>, maxBlocks = Infinity): Int32Array | undefined {
  const messages = body.messages;
  if (kind === "completions" || !Array.isArray(messages)) {
    const prompt = promptOf(kind, body);
    return prompt === undefined ? undefined : blockHashes(prompt, maxBlocks);
  }
  const hasher = new BlockHasher(maxBlocks);
  for (const message of messages) {
    const { role, content } = (typeof message === "object" && message !== null ? message : {}) as { role?: unknown; content?: unknown };
    hasher.addMessage(typeof role === "string" ? role : "", typeof content === "string" ? content : JSON.stringify(content ?? null));
  }
  return hasher.blocks();
}

// Two UTF-16 code units a step (rotate, xor, multiply by the golden ratio's 32 bits, as FxHash
// does): half the steps of a hash per unit, and the rotation brings every bit back to the low ones.
const SEED = 0x811c9dc5 | 0;
const MULTIPLIER = 0x9e3779b9 | 0;
const PAIRS_A_BLOCK = BLOCK_CHARS / 2;
const LOW_BITS = 0x40004000;

/**
 * One running hash over a prompt's code units fed in order, in pieces (strings, or runs of ASCII
 * bytes of a raw body, each byte one unit), read at each block's end: a block's hash names its
 * whole prefix, not only its own characters. Int32 values: small integers in V8, cheap as map keys.
 */
export class BlockHasher {
  private hash = SEED;
  /** Pairs still to come before the current block ends. */
  private left = PAIRS_A_BLOCK;
  /** The first unit of a pair whose second is still to come, else -1. */
  private half = -1;
  private count = 0;
  private out: Int32Array;

  /** `expected`: the blocks likely to come (a raw body's length over BLOCK_CHARS), room made for them at once. */
  constructor(
    private readonly maxBlocks = Infinity,
    expected = 16,
  ) {
    this.out = new Int32Array(Math.max(1, Math.min(maxBlocks, expected)));
  }

  /** Whether no more blocks are wanted: the rest of the prompt need not be read. */
  get full(): boolean {
    return this.count >= this.maxBlocks;
  }

  addString(text: string, from = 0, to = text.length): void {
    if (from >= to) return;
    let at = from;
    if (this.half >= 0) this.step(this.half | (text.charCodeAt(at++) << 16));
    let hash = this.hash;
    let left = this.left;
    // A block at a time: its pairs, then its hash kept.
    while (this.count < this.maxBlocks) {
      const pairs = Math.min(left, (to - at) >> 1);
      for (const end = at + 2 * pairs; at < end; at += 2) hash = Math.imul(((hash << 5) | (hash >>> 27)) ^ (text.charCodeAt(at) | (text.charCodeAt(at + 1) << 16)), MULTIPLIER);
      left -= pairs;
      if (left > 0) break;
      this.put(this.count++, hash);
      left = PAIRS_A_BLOCK;
    }
    this.hash = hash;
    this.left = left;
    this.half = at < to && !this.full ? text.charCodeAt(at) : -1;
  }

  /**
   * Bytes `from`..`to` of a raw body as units, if they are all printable ASCII (a JSON string's
   * characters as they are); else false, and nothing is fed: the caller decodes them first.
   */
  addAscii(bytes: Uint8Array, from: number, to: number): boolean {
    let at = from;
    let hash = this.hash;
    let left = this.left;
    let count = this.count;
    let first = this.half;
    // Two bytes a word, one in each 16-bit half: a half below 0x20 clears bit 14 of its half in
    // `low`, one above 0x7e sets bit 7 or 8 of its half in `high`.
    let low = LOW_BITS;
    let high = 0;
    if (first >= 0 && at < to) {
      // The pair's first unit came before (a separator may be one): only this byte is checked.
      const second = bytes[at++]!;
      low &= (second | LOW_BITS) - 0x0020;
      high |= (second + 1) & 0x0180;
      hash = Math.imul(((hash << 5) | (hash >>> 27)) ^ (first | (second << 16)), MULTIPLIER);
      if (--left === 0) {
        this.put(count++, hash);
        left = PAIRS_A_BLOCK;
      }
      first = -1;
    }
    while (count < this.maxBlocks) {
      const pairs = Math.min(left, (to - at) >> 1);
      for (const end = at + 2 * pairs; at < end; at += 2) {
        const word = bytes[at]! | (bytes[at + 1]! << 16);
        low &= (word | LOW_BITS) - 0x00200020;
        high |= (word + 0x00010001) & 0x01800180;
        hash = Math.imul(((hash << 5) | (hash >>> 27)) ^ word, MULTIPLIER);
      }
      left -= pairs;
      if (left > 0) break;
      this.put(count++, hash);
      left = PAIRS_A_BLOCK;
    }
    const full = count >= this.maxBlocks;
    if (at < to && !full) {
      first = bytes[at]!;
      low &= (first | LOW_BITS) - 0x0020;
      high |= (first + 1) & 0x0180;
    }
    if ((low & LOW_BITS) !== LOW_BITS || high !== 0) return false;
    this.hash = hash;
    this.left = left;
    this.count = count;
    this.half = full ? -1 : first;
    return true;
  }

  /** A chat message as promptOf writes it: its role, its content, each ended by a separator. */
  addMessage(role: string, content: string): void {
    this.addString(role);
    this.addString(ROLE_END);
    this.addString(content);
    this.addString(MESSAGE_END);
  }

  /** The hashes of the whole blocks fed. */
  blocks(): Int32Array {
    return this.out.subarray(0, this.count);
  }

  private step(word: number): void {
    if (this.full) return;
    this.hash = Math.imul(((this.hash << 5) | (this.hash >>> 27)) ^ word, MULTIPLIER);
    if (--this.left === 0) {
      this.push(this.hash);
      this.left = PAIRS_A_BLOCK;
    }
  }

  private push(hash: number): void {
    this.put(this.count++, hash);
  }

  /** Block `at`'s hash; a block past `count` is not counted until the caller commits it. */
  private put(at: number, hash: number): void {
    if (at === this.out.length) {
      const wider = new Int32Array(this.out.length * 2);
      wider.set(this.out);
      this.out = wider;
    }
    this.out[at] = hash;
  }
}
