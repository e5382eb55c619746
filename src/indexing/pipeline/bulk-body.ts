// One bulk request's body: items' NDJSON lines written as UTF-8 into one buffer that is reused
// from bulk to bulk, with where each item ends. No object, array or string per item lives on: an
// item's action (its _id and version) is read back from the bytes only when a caller needs it.

/** An item's action line, read back from the body. */
export interface BulkAction {
  readonly kind: "index" | "create" | "update" | "delete";
  readonly id: string;
  /** External version (decimal digits), when the item carries one. */
  readonly version?: string;
}

const NEWLINE = 10;

export class BulkBody {
  private buffer: Buffer;
  private ends: Uint32Array;
  private used = 0;
  private items = 0;

  constructor(maxItems: number, initialBytes = 64 * 1024) {
    this.buffer = Buffer.allocUnsafeSlow(initialBytes);
    this.ends = new Uint32Array(maxItems + 1);
  }

  get count(): number {
    return this.items;
  }

  get byteLength(): number {
    return this.used;
  }

  /** The request body: a view of the buffer, valid until the body is cleared. */
  get bytes(): Buffer {
    return this.buffer.subarray(0, this.used);
  }

  /** Appends one item: its NDJSON lines, each ending in a newline. Returns the item's byte size. */
  append(lines: string): number {
    if (typeof lines !== "string" || lines.charCodeAt(lines.length - 1) !== NEWLINE) {
      throw new TypeError(`a bulk item is NDJSON lines ending in a newline, got ${describe(lines)}`);
    }
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    this.reserve(lines.length * 3);
    return this.close(this.buffer.write(lines, this.used));
  }

  /** Appends an item's bytes as another body holds them (a retry, an item moved to the next body). */
  appendBytes(bytes: Uint8Array): void {
    this.reserve(bytes.length);
    this.buffer.set(bytes, this.used);
    this.close(bytes.length);
  }

  /** The bytes of item `i`. */
  item(i: number): Buffer {
    return this.buffer.subarray(this.start(i), this.ends[i]);
  }

  /** Takes the last item out (it is copied elsewhere first). */
  dropLast(): void {
    this.items--;
    this.used = this.start(this.items);
  }

  /** Reads item `i`'s action line: one short JSON object. */
  action(i: number): BulkAction {
    const start = this.start(i);
    const line = this.buffer.toString("utf8", start, this.buffer.indexOf(NEWLINE, start));
    const parsed = JSON.parse(line) as Record<string, { _id?: unknown; version?: unknown }>;
    const kind = Object.keys(parsed)[0] as BulkAction["kind"];
    const target = parsed[kind] ?? {};
    return { kind, id: String(target._id), version: target.version === undefined ? undefined : String(target.version) };
  }

  clear(): void {
    this.used = 0;
    this.items = 0;
  }

  private start(i: number): number {
    return i === 0 ? 0 : (this.ends[i - 1] as number);
  }

  private close(bytes: number): number {
    this.used += bytes;
    if (this.items === this.ends.length) {
      const ends = new Uint32Array(this.ends.length * 2);
      ends.set(this.ends);
      this.ends = ends;
    }
    this.ends[this.items++] = this.used;
    return bytes;
  }

  private reserve(bytes: number): void {
    if (this.used + bytes <= this.buffer.length) return;
    const grown = Buffer.allocUnsafeSlow(Math.max(this.buffer.length * 2, this.used + bytes));
    this.buffer.copy(grown, 0, 0, this.used);
    this.buffer = grown;
  }
}

function describe(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value.slice(-40)) : typeof value;
}
