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

/** A prompt's block hashes in order, int32 values: small integers in V8, cheap to keep and compare. */
export type BlockHashes = readonly number[];

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
export function blockHashes(text: string, maxBlocks = Infinity): BlockHashes {
  const hasher = new BlockHasher(maxBlocks);
  hasher.addString(text);
  return hasher.blocks();
}

/**
 * The blocks of a parsed request's prompt: blockHashes(promptOf(kind, body)), its pieces hashed
 * where they lie rather than joined into one string first.
 */
export function promptBlocks(kind: PromptKind, body: Record<string, unknown>, maxBlocks = Infinity): BlockHashes | undefined {
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

// Eight UTF-16 code units a step. Units of a byte each (ASCII, most prompts) make two 32-bit words
// of four, so that a raw body's bytes are hashed eight at a time: the first word rotated into the
// hash, xored and multiplied by the golden ratio's 32 bits (as FxHash does), the second xored into
// the product, to be multiplied with the next step's. A step with a wider unit takes its units
// as four words of two. A block's steps go by turns into two running hashes, joined at its end
// into the block's hash, from which both start the next block: the processor works on the two at
// once.
const SEED = 0x811c9dc5 | 0;
const MULTIPLIER = 0x9e3779b9 | 0;
const UNITS_A_STEP = 8;
const STEPS_A_BLOCK = BLOCK_CHARS / UNITS_A_STEP;
/** Bytes below 0x20 (after subtracting it from each byte, a borrow) or from 0x80 set one of these bits. */
const NOT_ASCII_TEXT = 0x80808080 | 0;

const mix = (hash: number, word: number): number => Math.imul(((hash << 5) | (hash >>> 27)) ^ word, MULTIPLIER);

/** Two words into a running hash: the second is multiplied in by the next mix. */
const fold = (hash: number, first: number, second: number): number => mix(hash, first) ^ second;

/** Four units as one word of bytes (all below 0x100), or two units as one word of halves. */
const bytesWord = (c0: number, c1: number, c2: number, c3: number): number => c0 | (c1 << 8) | (c2 << 16) | (c3 << 24);
const halvesWord = (c0: number, c1: number): number => c0 | (c1 << 16);

/** A running hash after one step of eight units. */
// prettier-ignore
const step = (hash: number, c0: number, c1: number, c2: number, c3: number, c4: number, c5: number, c6: number, c7: number): number =>
  (c0 | c1 | c2 | c3 | c4 | c5 | c6 | c7) < 0x100
    ? fold(hash, bytesWord(c0, c1, c2, c3), bytesWord(c4, c5, c6, c7))
    : fold(fold(hash, halvesWord(c0, c1), halvesWord(c2, c3)), halvesWord(c4, c5), halvesWord(c6, c7));

/** A running hash after the step of `text`'s eight units from `at`. */
// prettier-ignore
const stepAt = (hash: number, text: string, at: number): number =>
  step(hash, text.charCodeAt(at), text.charCodeAt(at + 1), text.charCodeAt(at + 2), text.charCodeAt(at + 3), text.charCodeAt(at + 4), text.charCodeAt(at + 5), text.charCodeAt(at + 6), text.charCodeAt(at + 7));

/** Four bytes as one word, the first in the low bits: one load. */
const wordAt = (view: DataView, at: number): number => view.getInt32(at, true);

/** A word with a byte below 0x20 or from 0x80 (not a JSON string's characters as they are) sets a bit of NOT_ASCII_TEXT here. */
const notText = (word: number): number => (word - 0x20202020) | word;

/** The same for one byte. */
const notTextByte = (byte: number): number => (byte - 0x20) | byte;

/** How many numbers BlockHasher.saveState() writes. */
export const HASHER_STATE = 5 + UNITS_A_STEP - 1;

/**
 * One running hash over a prompt's code units fed in order, in pieces (strings, or runs of ASCII
 * bytes of a raw body, each byte one unit), read at each block's end: a block's hash names its
 * whole prefix, not only its own characters. Int32 values: small integers in V8, cheap as map keys.
 */
export class BlockHasher {
  /** The running hashes of the current block's even and odd steps. */
  private even = SEED;
  private odd = ~SEED;
  /** Steps still to come before the current block ends; when even, the next step is an even one. */
  private left = STEPS_A_BLOCK;
  /** The units of a step whose rest is still to come (a piece ended within it): the first `carried`. */
  private readonly units = [0, 0, 0, 0, 0, 0, 0];
  private carried = 0;
  private count = 0;
  /** The blocks written, made when the first piece is fed (at `expected` blocks). */
  private out: number[] | undefined;
  /** The blocks restoreState took up: shared with whoever kept them until a piece is fed (then copied to `out`). */
  private taken: BlockHashes | undefined;
  private readonly expected: number;
  private viewed: Uint8Array | undefined;
  private view: DataView | undefined;

  /**
   * `expected`: about how many blocks will be fed, so that their array is made once at its size
   * rather than grown as they come (more are still taken).
   */
  constructor(
    private readonly maxBlocks = Infinity,
    expected = 0,
  ) {
    this.expected = Math.min(expected, maxBlocks);
  }

  /** Whether no more blocks are wanted: the rest of the prompt need not be read. */
  get full(): boolean {
    return this.count >= this.maxBlocks;
  }

  addString(text: string, from = 0, to = text.length): void {
    const out = this.written();
    let at = from;
    while (this.carried > 0 && at < to) this.unit(text.charCodeAt(at++));
    let even = this.even;
    let odd = this.odd;
    let left = this.left;
    let count = this.count;
    // A block at a time: its steps by turns into the two hashes, then the block's hash kept.
    while (count < this.maxBlocks) {
      const steps = Math.min(left, Math.floor((to - at) / UNITS_A_STEP));
      let todo = steps;
      if (todo > 0 && (left & 1) === 1) {
        odd = stepAt(odd, text, at);
        at += UNITS_A_STEP;
        todo--;
      }
      for (; todo >= 2; todo -= 2, at += 2 * UNITS_A_STEP) {
        even = stepAt(even, text, at);
        odd = stepAt(odd, text, at + UNITS_A_STEP);
      }
      if (todo === 1) {
        even = stepAt(even, text, at);
        at += UNITS_A_STEP;
      }
      left -= steps;
      if (left > 0) break;
      even = mix(even, odd);
      odd = ~even;
      out[count++] = even;
      left = STEPS_A_BLOCK;
    }
    this.even = even;
    this.odd = odd;
    this.left = left;
    this.count = count;
    while (at < to && !this.full) this.unit(text.charCodeAt(at++));
  }

  /**
   * Bytes `from`..`to` of a raw body as units, if they are all ASCII from 0x20 (a JSON string's
   * characters as they are); else false, and nothing is fed: the caller decodes them first.
   */
  addAscii(bytes: Uint8Array, from: number, to: number): boolean {
    // As it was, should a byte turn out not to be ASCII text (the units carried are only added to).
    const even0 = this.even;
    const odd0 = this.odd;
    const left0 = this.left;
    const count0 = this.count;
    const carried0 = this.carried;
    const view = this.viewOf(bytes);
    const out = this.written();
    let at = from;
    let bad = 0;
    for (; this.carried > 0 && at < to; at++) {
      bad |= notTextByte(bytes[at]!);
      this.unit(bytes[at]!);
    }
    let even = this.even;
    let odd = this.odd;
    let left = this.left;
    let count = this.count;
    while (count < this.maxBlocks) {
      const steps = Math.min(left, Math.floor((to - at) / UNITS_A_STEP));
      let todo = steps;
      if (todo > 0 && (left & 1) === 1) {
        const first = wordAt(view, at);
        const second = wordAt(view, at + 4);
        bad |= notText(first) | notText(second);
        odd = fold(odd, first, second);
        at += UNITS_A_STEP;
        todo--;
      }
      for (; todo >= 2; todo -= 2, at += 2 * UNITS_A_STEP) {
        const first = wordAt(view, at);
        const second = wordAt(view, at + 4);
        const third = wordAt(view, at + 8);
        const fourth = wordAt(view, at + 12);
        bad |= notText(first) | notText(second) | notText(third) | notText(fourth);
        even = fold(even, first, second);
        odd = fold(odd, third, fourth);
      }
      if (todo === 1) {
        const first = wordAt(view, at);
        const second = wordAt(view, at + 4);
        bad |= notText(first) | notText(second);
        even = fold(even, first, second);
        at += UNITS_A_STEP;
      }
      left -= steps;
      if (left > 0) break;
      even = mix(even, odd);
      odd = ~even;
      out[count++] = even;
      left = STEPS_A_BLOCK;
    }
    for (let i = at; i < to; i++) bad |= notTextByte(bytes[i]!);
    if ((bad & NOT_ASCII_TEXT) !== 0) {
      // Blocks written past `count` are not counted: the next ones write over them.
      this.even = even0;
      this.odd = odd0;
      this.left = left0;
      this.count = count0;
      this.carried = carried0;
      return false;
    }
    this.even = even;
    this.odd = odd;
    this.left = left;
    this.count = count;
    while (at < to && !this.full) this.unit(bytes[at++]!);
    return true;
  }

  /** A chat message as promptOf writes it: its role, its content, each ended by a separator. */
  addMessage(role: string, content: string): void {
    this.addString(role);
    this.addString(ROLE_END);
    this.addString(content);
    this.addString(MESSAGE_END);
  }

  /** Appends the hasher's state (HASHER_STATE numbers) to `to`, to be taken up again by restoreState(). */
  saveState(to: number[]): void {
    to.push(this.even, this.odd, this.left, this.carried, this.count);
    for (let i = 0; i < this.units.length; i++) to.push(this.units[i]!);
  }

  /** How many blocks a hasher had in the state saved at `states[at]`. */
  static blocksOfState(states: ArrayLike<number>, at: number): number {
    return states[at + 4]!;
  }

  /**
   * Takes up the state saved at `states[at]` by a hasher fed the same units, whose blocks were
   * `blocks` (its first `count` are this one's now): as if this one had been fed those units.
   */
  restoreState(states: ArrayLike<number>, at: number, blocks: BlockHashes): void {
    this.even = states[at]!;
    this.odd = states[at + 1]!;
    this.left = states[at + 2]!;
    this.carried = states[at + 3]!;
    this.count = states[at + 4]!;
    for (let i = 0; i < this.units.length; i++) this.units[i] = states[at + 5 + i]!;
    // Not copied: a prompt repeated whole (a retry, a prompt sent again) feeds nothing more.
    this.taken = blocks;
    this.out = undefined;
  }

  /** The hashes of the whole blocks fed. */
  blocks(): BlockHashes {
    if (this.out === undefined) return this.taken === undefined ? [] : this.taken.length === this.count ? this.taken : this.taken.slice(0, this.count);
    // Past `count`: blocks of bytes given back (addAscii).
    this.out.length = this.count;
    return this.out;
  }

  /** The array blocks are written to: the blocks taken up, copied, or a new one. */
  private written(): number[] {
    if (this.out === undefined) {
      this.out = this.taken !== undefined ? this.taken.slice(0, this.count) : this.expected > 0 ? new Array<number>(this.expected) : [];
      this.taken = undefined;
    }
    return this.out;
  }

  /** A DataView of `bytes`, made once for all the strings of a body. */
  private viewOf(bytes: Uint8Array): DataView {
    if (this.viewed !== bytes) {
      this.viewed = bytes;
      this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    return this.view!;
  }

  /** One more unit: a step once there are eight. */
  private unit(unit: number): void {
    if (this.carried < UNITS_A_STEP - 1) {
      this.units[this.carried++] = unit;
      return;
    }
    this.carried = 0;
    if (this.full) return;
    const u = this.units;
    if ((this.left & 1) === 1) this.odd = step(this.odd, u[0]!, u[1]!, u[2]!, u[3]!, u[4]!, u[5]!, u[6]!, unit);
    else this.even = step(this.even, u[0]!, u[1]!, u[2]!, u[3]!, u[4]!, u[5]!, u[6]!, unit);
    if (--this.left === 0) {
      this.even = mix(this.even, this.odd);
      this.odd = ~this.even;
      this.out![this.count++] = this.even;
      this.left = STEPS_A_BLOCK;
    }
  }
}
