import type { Writable } from "node:stream";
import { DEFAULT_KEPT_BODY_BYTES } from "../../config.js";
import type { NodeRequest } from "../node-http.js";

/**
 * The bytes of request bodies the proxy keeps in this process for holding and retries, and their
 * bound (GPU_ENDPOINT_KEPT_BODY_BYTES): memory off the V8 heap, which --max-old-space-size does
 * not limit. One per process, across all endpoints.
 */
export class KeptBytes {
  private used = 0;

  constructor(readonly limit: number = DEFAULT_KEPT_BODY_BYTES) {}

  /** Bytes kept now. */
  get bytes(): number {
    return this.used;
  }

  /** Counts `n` more bytes if they fit under the limit; false (nothing counted) if not. */
  take(n: number): boolean {
    if (this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }

  give(n: number): void {
    this.used -= n;
  }
}

/**
 * A request body passed on as it arrives, and kept (up to `limit` bytes) so that a retry on
 * another replica can send it again. A body over the limit calls `onOverflow` once and is
 * dropped from then on: the caller answers 413. Once no retry can come (the answer started, or
 * the exchange is over), `release` lets the kept copy go: a long stream must not hold its
 * request (up to MAX_BODY_BYTES) until its end.
 *
 * The copy is counted in `budget` as it is kept: a declared Content-Length at once (a request
 * that cannot be kept is known before its upload), the rest of a body as its chunks arrive. When
 * the budget has no room the copy is dropped (`onUnkept`), and the body is still passed on.
 */
export class KeptBody {
  /** Undefined once released or overflowed: nothing is kept any more. */
  private chunks: Buffer[] | undefined = [];
  private size = 0;
  /** Bytes counted in the budget for this body: its declared length, or what arrived beyond. */
  private counted = 0;
  private ended = false;
  private sink: Writable | undefined;
  overflowed = false;

  /**
   * Called once when the body goes over the limit; replaceable, as a held request's body is read
   * (HTTP_REQUEST_TIMEOUT_MS bounds its upload) before the exchange that sends it exists.
   */
  onOverflow: () => void;
  /** Called once if the budget cannot keep the body (nothing is kept from then on); set while held. */
  onUnkept: (() => void) | undefined;
  /** Waits for the body's end (whenWhole). */
  private onEnded: ((bytes: Buffer | undefined) => void) | undefined;

  constructor(req: NodeRequest, private readonly limit: number, private readonly budget: KeptBytes, onOverflow: () => void) {
    this.onOverflow = onOverflow;
    const declared = Number(req.headers["content-length"] ?? 0);
    if (Number.isSafeInteger(declared) && declared > 0) this.count(declared);
    req.on("data", (chunk: Buffer) => {
      if (this.overflowed) return;
      this.size += chunk.length;
      if (this.size > limit) {
        this.overflowed = true;
        this.release();
        this.onOverflow();
        return;
      }
      if (this.chunks !== undefined && this.count(this.size)) this.chunks.push(chunk);
      this.sink?.write(chunk);
    });
    req.once("end", () => {
      this.ended = true;
      if (!this.overflowed) this.sink?.end();
      const then = this.onEnded;
      this.onEnded = undefined;
      then?.(this.kept());
    });
  }

  /**
   * Calls `then` with the whole body once it has arrived (at once if it has), while it is kept;
   * with undefined when it is not (over the limit, or no room in the budget). A request cut before
   * its end never calls it: the caller's close ends the exchange that waits (no listener more per
   * request for that, nor a promise).
   */
  whenWhole(then: (bytes: Buffer | undefined) => void): void {
    if (this.ended || this.chunks === undefined) then(this.kept());
    else this.onEnded = then;
  }

  /** The whole body, when it has all arrived and is kept: sent in one piece. */
  arrived(): Buffer | undefined {
    return this.ended ? this.kept() : undefined;
  }

  /** What is kept of the body, in one piece; undefined when nothing is. */
  private kept(): Buffer | undefined {
    if (this.chunks === undefined || this.overflowed) return undefined;
    return this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
  }

  /** Bytes of the body received so far, kept or not: a prompt's size when no replica counted it. */
  get received(): number {
    return this.size;
  }

  /** True while the whole body so far is kept: it can be sent again. */
  get replayable(): boolean {
    return this.chunks !== undefined;
  }

  /** Sends what has arrived to `sink`, then the rest as it comes; ends `sink` with the body. */
  sendTo(sink: Writable): void {
    // A body never kept (no room in the budget) goes once, from its start, as it arrives.
    if (this.chunks === undefined && this.size > 0) throw new Error("a released body cannot be sent again");
    this.sink = sink;
    for (const chunk of this.chunks ?? []) sink.write(chunk);
    if (this.ended) sink.end();
  }

  /** Stops passing chunks to the current sink (it was abandoned for a retry or an error). */
  detach(): void {
    this.sink = undefined;
  }

  /** Drops the kept copy; the rest of the body still goes to the current sink as it comes. */
  release(): void {
    if (this.chunks === undefined) return;
    this.budget.give(this.counted);
    this.counted = 0;
    this.chunks = undefined;
  }

  /** Counts the copy up to `bytes` in the budget; when it does not fit, drops the copy and says so. */
  private count(bytes: number): boolean {
    if (bytes <= this.counted) return true;
    if (this.budget.take(bytes - this.counted)) {
      this.counted = bytes;
      return true;
    }
    this.release();
    const onUnkept = this.onUnkept;
    this.onUnkept = undefined;
    onUnkept?.();
    return false;
  }
}
