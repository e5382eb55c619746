import { isAscii } from "node:buffer";
import { BLOCK_CHARS, BlockHasher, MESSAGE_END, ROLE_END, type BlockHashes, type PromptKind } from "./prompt-blocks.js";
import type { MessagesTrace, RecentMessages } from "./recent-messages.js";

// A prompt's blocks read from a request's raw JSON body, without parsing it (SPEC.md section 2,
// "Requests that share a prompt go where it is cached"): the same blocks as promptBlocks() of the
// parsed body, at a fraction of the cost, since most of a long prompt is a few JSON strings whose
// bytes are hashed where they lie. The body is still checked whole as JSON would be; a string with
// escapes or non-ASCII characters is decoded by JSON.parse alone. What this reader does not take
// on (a message's content as parts, a key spelled with escapes, a repeated key, anything not JSON)
// it gives up on, and the caller parses the body as before. It also says whether the body's top
// level has a key the caller asks about (the proxy's "stream": a streamed answer's plan needs the
// parsed body, but not its prompt read again). Given the recent messages (recent-messages.ts), a
// chat's messages that begin as a recent body's are taken up from there rather than read again.

/** The reader gave up: parse the body. */
export const UNREAD = Symbol("unread");

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
/** Bytes of a string searched for its closing quote (or a backslash) one by one, before indexOf takes over. */
const SHORT_STRING = 32;
const NAMES = { messages: Buffer.from("messages"), prompt: Buffer.from("prompt"), role: Buffer.from("role"), content: Buffer.from("content") };

class GiveUp extends Error {}

export interface RawPrompt {
  /** blockHashes(promptOf(kind, JSON.parse(bytes))) up to maxBlocks; undefined when it has no prompt. */
  blocks: BlockHashes | undefined;
  /** Whether the body's top level has the key asked about. */
  keyFound: boolean;
}

/**
 * The prompt's blocks, and whether the body's top level has the key `keyAsked`; or UNREAD.
 * `recent`: the messages of recent bodies, read with the same maxBlocks (else not used).
 */
export function readRawPrompt(kind: PromptKind, bytes: Buffer, maxBlocks = Infinity, keyAsked?: Buffer, recent?: RecentMessages): RawPrompt | typeof UNREAD {
  try {
    const body = new RawBody(bytes, keyAsked, recent?.maxBlocks === maxBlocks ? recent : undefined);
    // A byte is at most one unit of the prompt: no more blocks than the body has BLOCK_CHARS bytes.
    const blocks = body.prompt(kind, new BlockHasher(maxBlocks, Math.floor(bytes.length / BLOCK_CHARS)));
    return { blocks, keyFound: body.keyFound };
  } catch (err) {
    // A body too deep for the stack is parsed too.
    if (err instanceof GiveUp || err instanceof RangeError || err instanceof SyntaxError) return UNREAD;
    throw err;
  }
}

/** One pass over a body, failing (GiveUp) at the first thing it does not read as JSON.parse would. */
class RawBody {
  private at = 0;
  /** The next backslash at or after `at`, or the body's length: a string before it has no escapes. */
  private backslash = -1;

  /** Whether the whole body is ASCII (then no string of it needs that check of its own); undefined until a string is fed. */
  private ascii: boolean | undefined;

  /** The reading of a chat's messages, given the recent messages: what it took up, what it read. */
  private trace: MessagesTrace | undefined;

  /**
   * The last string read (string()): its bytes between its quotes, and whether any is an escape.
   * Kept in fields rather than returned as an object: a body has many strings.
   */
  private start = 0;
  private end = 0;
  private escaped = false;

  /** Whether the top level has the key asked about. */
  keyFound = false;

  constructor(
    private readonly bytes: Buffer,
    private readonly keyAsked?: Buffer,
    private readonly recent?: RecentMessages,
  ) {}

  prompt(kind: PromptKind, hasher: BlockHasher): BlockHashes | undefined {
    const wanted = kind === "chat" ? NAMES.messages : NAMES.prompt;
    let found = false;
    this.expect(0x7b);
    if (!this.eat(0x7d)) {
      do {
        this.key();
        const isWanted = this.named(wanted);
        if (!isWanted && this.keyAsked !== undefined && this.named(this.keyAsked)) this.keyFound = true;
        this.expect(0x3a);
        if (isWanted) {
          if (found) throw new GiveUp();
          found = true;
          if (kind === "chat") this.messages(hasher);
          else this.feedString(hasher);
        } else this.skipValue();
      } while (this.eat(0x2c));
      this.expect(0x7d);
    }
    this.space();
    if (this.at !== this.bytes.length) throw new GiveUp();
    if (!found) return undefined;
    const blocks = hasher.blocks();
    if (this.trace !== undefined) this.recent!.remember(this.bytes, this.trace, blocks);
    return blocks;
  }

  /** A chat's messages, those a recent body began with taken up from there (recent-messages.ts). */
  private messages(hasher: BlockHasher): void {
    this.expect(0x5b);
    const trace = (this.trace = this.recent?.recall(this.bytes, this.at, hasher));
    if (trace !== undefined && trace.taken > 0) this.at = trace.at;
    else {
      if (this.eat(0x5d)) return;
      this.message(hasher);
      trace?.ended(this.at, hasher);
    }
    while (this.eat(0x2c)) {
      this.message(hasher);
      trace?.ended(this.at, hasher);
    }
    this.expect(0x5d);
  }

  /** A chat's message: an object whose role and content are strings (else GiveUp), role first whatever their order. */
  private message(hasher: BlockHasher): void {
    // Each one's string as read: its bounds, -1 when absent; escaped or not.
    let roleStart = -1;
    let roleEnd = -1;
    let roleEscaped = false;
    let contentStart = -1;
    let contentEnd = -1;
    let contentEscaped = false;
    this.expect(0x7b);
    if (!this.eat(0x7d)) {
      do {
        this.key();
        const isRole = this.named(NAMES.role);
        const isContent = !isRole && this.named(NAMES.content);
        this.expect(0x3a);
        if (isRole) {
          this.string();
          roleStart = this.start;
          roleEnd = this.end;
          roleEscaped = this.escaped;
        } else if (isContent) {
          this.string();
          contentStart = this.start;
          contentEnd = this.end;
          contentEscaped = this.escaped;
        } else this.skipValue();
      } while (this.eat(0x2c));
      this.expect(0x7d);
    }
    if (roleStart >= 0) this.feed(hasher, roleStart, roleEnd, roleEscaped);
    hasher.addString(ROLE_END);
    if (contentStart >= 0) this.feed(hasher, contentStart, contentEnd, contentEscaped);
    else hasher.addString("null");
    hasher.addString(MESSAGE_END);
  }

  private feedString(hasher: BlockHasher): void {
    this.string();
    this.feed(hasher, this.start, this.end, this.escaped);
  }

  /** A string's characters (bytes `start`..`end`) into the hasher. */
  private feed(hasher: BlockHasher, start: number, end: number, escaped: boolean): void {
    if (hasher.full) return this.check(start, end, escaped);
    // Non-ASCII text is found natively first, rather than by a hashing pass given up at its end.
    this.ascii ??= isAscii(this.bytes);
    if (escaped || (!this.ascii && !isAscii(this.bytes.subarray(start, end))) || !hasher.addAscii(this.bytes, start, end)) hasher.addString(this.decode(start, end));
  }

  /** A string's value: JSON.parse decodes it (escapes, UTF-8) and checks it (no control characters). */
  private decode(start: number, end: number): string {
    return JSON.parse(this.bytes.toString("utf8", start - 1, end + 1)) as string;
  }

  /** Throws where JSON.parse would on the string: an escape or a character below 0x20 it refuses. */
  private check(start: number, end: number, escaped: boolean): void {
    if (escaped) this.decode(start, end);
    else for (let i = start; i < end; i++) if (this.bytes[i]! < 0x20) throw new GiveUp();
  }

  /** The last string read, checked. */
  private checkString(): void {
    this.check(this.start, this.end, this.escaped);
  }

  /** A string value: sets its bytes' bounds, quotes excluded, and whether it has escapes. */
  private string(): void {
    this.space();
    const bytes = this.bytes;
    if (bytes[this.at] !== QUOTE) throw new GiveUp();
    const start = this.at + 1;
    // Most of a body's strings are short (keys, roles, a model's name): their closing quote is
    // found sooner by a few compares here than by a call into indexOf, and so is a backslash.
    const near = Math.min(start + SHORT_STRING, bytes.length);
    for (let i = start; i < near; i++) {
      const b = bytes[i];
      if (b === BACKSLASH) break;
      if (b === QUOTE) {
        this.at = i + 1;
        this.start = start;
        this.end = i;
        this.escaped = false;
        return;
      }
    }
    let end = this.closingQuote(start);
    if (this.backslash < start) this.backslash = this.nextBackslash(start);
    const escaped = this.backslash < end;
    if (escaped) {
      // Escapes: the closing quote is the first one not escaped (none comes before the first backslash).
      let i = this.backslash;
      for (;;) {
        const b = this.bytes[i];
        if (b === undefined) throw new GiveUp();
        if (b === QUOTE) break;
        i += b === BACKSLASH ? 2 : 1;
      }
      end = i;
      this.backslash = this.nextBackslash(end + 1);
    }
    this.at = end + 1;
    this.start = start;
    this.end = end;
    this.escaped = escaped;
  }

  /** The first quote from `from`: indexOf, for a long string (or one with a backslash). */
  private closingQuote(from: number): number {
    const end = this.bytes.indexOf(QUOTE, from);
    if (end < 0) throw new GiveUp();
    return end;
  }

  private nextBackslash(from: number): number {
    const next = this.bytes.indexOf(BACKSLASH, from);
    return next < 0 ? this.bytes.length : next;
  }

  /** An object's key: an escaped one is not compared (GiveUp). */
  private key(): void {
    this.string();
    if (this.escaped) throw new GiveUp();
    this.checkString();
  }

  /** Whether the last string read is `name`. */
  private named(name: Buffer): boolean {
    // Compared here: a few bytes, fewer than a call to Buffer.compare costs.
    const { start, end } = this;
    if (end - start !== name.length) return false;
    for (let i = 0; i < name.length; i++) if (this.bytes[start + i] !== name[i]) return false;
    return true;
  }

  /** Any JSON value, checked as JSON.parse checks it; its strings' contents by JSON.parse when they have escapes. */
  private skipValue(): void {
    this.space();
    const b = this.bytes[this.at];
    if (b === QUOTE) {
      this.string();
      this.checkString();
    }
    else if (b === 0x7b || b === 0x5b) {
      const close = b + 2;
      this.at++;
      if (this.eat(close)) return;
      do {
        if (b === 0x7b) {
          this.string();
          this.checkString();
          this.expect(0x3a);
        }
        this.skipValue();
      } while (this.eat(0x2c));
      this.expect(close);
    } else if (b === 0x74) this.literal("true");
    else if (b === 0x66) this.literal("false");
    else if (b === 0x6e) this.literal("null");
    else this.number();
  }

  private literal(word: string): void {
    for (let i = 0; i < word.length; i++) if (this.bytes[this.at + i] !== word.charCodeAt(i)) throw new GiveUp();
    this.at += word.length;
  }

  /** -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
  private number(): void {
    this.eat(0x2d, false);
    if (this.bytes[this.at] === 0x30) this.at++;
    else this.digits();
    if (this.eat(0x2e, false)) this.digits();
    if (this.bytes[this.at] === 0x65 || this.bytes[this.at] === 0x45) {
      this.at++;
      if (this.bytes[this.at] === 0x2b || this.bytes[this.at] === 0x2d) this.at++;
      this.digits();
    }
  }

  /** One digit or more. */
  private digits(): void {
    const from = this.at;
    while (this.bytes[this.at]! >= 0x30 && this.bytes[this.at]! <= 0x39) this.at++;
    if (this.at === from) throw new GiveUp();
  }

  /** Takes `byte` (after white space, unless told not to skip it) if it comes next. */
  private eat(byte: number, space = true): boolean {
    if (space) this.space();
    if (this.bytes[this.at] !== byte) return false;
    this.at++;
    return true;
  }

  private expect(byte: number): void {
    if (!this.eat(byte)) throw new GiveUp();
  }

  private space(): void {
    for (;;) {
      const b = this.bytes[this.at];
      if (b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) return;
      this.at++;
    }
  }
}
