import type { Writable } from "node:stream";
import type { NodeRequest } from "../node-http.js";

/** Bytes of request bodies kept for a retry in this process, now: memory the proxy holds. */
let keptBytes = 0;

export function keptBodyBytes(): number {
  return keptBytes;
}

/**
 * A request body passed on as it arrives, and kept (up to `limit` bytes) so that a retry on
 * another replica can send it again. A body over the limit calls `onOverflow` once and is
 * dropped from then on: the caller answers 413. Once no retry can come (the answer started, or
 * the exchange is over), `release` lets the kept copy go: a long stream must not hold its
 * request (up to MAX_BODY_BYTES) until its end.
 */
export class KeptBody {
  /** Undefined once released or overflowed: nothing is kept any more. */
  private chunks: Buffer[] | undefined = [];
  private size = 0;
  private kept = 0;
  private ended = false;
  private sink: Writable | undefined;
  overflowed = false;

  /**
   * Called once when the body goes over the limit; replaceable, as a held request's body is read
   * (HTTP_REQUEST_TIMEOUT_MS bounds its upload) before the exchange that sends it exists.
   */
  onOverflow: () => void;

  constructor(req: NodeRequest, private readonly limit: number, onOverflow: () => void) {
    this.onOverflow = onOverflow;
    req.on("data", (chunk: Buffer) => {
      if (this.overflowed) return;
      this.size += chunk.length;
      if (this.size > limit) {
        this.overflowed = true;
        this.release();
        this.onOverflow();
        return;
      }
      if (this.chunks !== undefined) {
        this.chunks.push(chunk);
        this.kept += chunk.length;
        keptBytes += chunk.length;
      }
      this.sink?.write(chunk);
    });
    req.once("end", () => {
      this.ended = true;
      if (!this.overflowed) this.sink?.end();
    });
  }

  /** True while the whole body so far is kept: it can be sent again. */
  get replayable(): boolean {
    return this.chunks !== undefined;
  }

  /** Sends what has arrived to `sink`, then the rest as it comes; ends `sink` with the body. */
  sendTo(sink: Writable): void {
    if (this.chunks === undefined) throw new Error("a released body cannot be sent again");
    this.sink = sink;
    for (const chunk of this.chunks) sink.write(chunk);
    if (this.ended) sink.end();
  }

  /** Stops passing chunks to the current sink (it was abandoned for a retry or an error). */
  detach(): void {
    this.sink = undefined;
  }

  /** Drops the kept copy; the rest of the body still goes to the current sink as it comes. */
  release(): void {
    if (this.chunks === undefined) return;
    keptBytes -= this.kept;
    this.kept = 0;
    this.chunks = undefined;
  }
}
