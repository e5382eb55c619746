import type { Writable } from "node:stream";
import type { NodeRequest } from "../node-http.js";

/**
 * A request body passed on as it arrives, and kept (up to `limit` bytes) so that a retry on
 * another replica can send it again. A body over the limit calls `onOverflow` once and is
 * dropped from then on: the caller answers 413.
 */
export class KeptBody {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private ended = false;
  private sink: Writable | undefined;
  overflowed = false;

  constructor(req: NodeRequest, private readonly limit: number, onOverflow: () => void) {
    req.on("data", (chunk: Buffer) => {
      if (this.overflowed) return;
      this.size += chunk.length;
      if (this.size > limit) {
        this.overflowed = true;
        this.chunks.length = 0;
        onOverflow();
        return;
      }
      this.chunks.push(chunk);
      this.sink?.write(chunk);
    });
    req.once("end", () => {
      this.ended = true;
      if (!this.overflowed) this.sink?.end();
    });
  }

  /** Sends what has arrived to `sink`, then the rest as it comes; ends `sink` with the body. */
  sendTo(sink: Writable): void {
    this.sink = sink;
    for (const chunk of this.chunks) sink.write(chunk);
    if (this.ended) sink.end();
  }

  /** Stops passing chunks to the current sink (it was abandoned for a retry or an error). */
  detach(): void {
    this.sink = undefined;
  }
}
