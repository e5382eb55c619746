// A bounded single-producer, single-consumer channel that carries items in chunks (arrays, or
// anything that says how many items it holds, like the pipeline's BulkLines). A full channel
// makes `push` wait, which is how a slow bulk sender pauses the database reader; `cancel` wakes
// both sides when either gives up. Chunks, not single items, cross it: one await per chunk instead
// of several promises per row (docs/indexing.md, "What helped").

/** A chunk: its length is the number of items it holds. */
export interface Chunk {
  readonly length: number;
}

export interface Channel<C extends Chunk> extends AsyncIterable<C> {
  /**
   * Resolves once the chunk is queued; waits while it does not fit in the capacity (a chunk larger
   * than the capacity is queued alone, into an empty channel). Rejects after cancel.
   */
  push(chunk: C): Promise<void>;
  /** No more items: the consumer drains what is queued, then its iteration ends. */
  close(): void;
  /** Stops both sides: pending and later pushes reject with `reason`, iteration ends. */
  cancel(reason: Error): void;
  /** Items queued right now. */
  readonly size: number;
  /** The largest `size` seen, to verify the bound. */
  readonly maxSize: number;
}

export function createChannel<C extends Chunk>(capacity: number): Channel<C> {
  if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`channel capacity must be a positive integer, got ${capacity}`);
  let chunks: C[] = [];
  let size = 0;
  let closed = false;
  let cancelled: Error | undefined;
  let maxSize = 0;
  let wakeProducer: (() => void) | undefined;
  let wakeConsumer: (() => void) | undefined;

  const wake = () => {
    const p = wakeProducer;
    const c = wakeConsumer;
    wakeProducer = wakeConsumer = undefined;
    p?.();
    c?.();
  };

  async function push(chunk: C): Promise<void> {
    while (size > 0 && size + chunk.length > capacity && !cancelled) await new Promise<void>((resolve) => (wakeProducer = resolve));
    if (cancelled) throw cancelled;
    if (closed) throw new Error("push after close");
    if (chunk.length === 0) return;
    chunks.push(chunk);
    size += chunk.length;
    maxSize = Math.max(maxSize, size);
    wake();
  }

  async function* iterate(): AsyncGenerator<C> {
    for (;;) {
      if (cancelled) return;
      const chunk = chunks.shift();
      if (chunk !== undefined) {
        size -= chunk.length;
        wake();
        yield chunk;
      } else if (closed) {
        return;
      } else {
        await new Promise<void>((resolve) => (wakeConsumer = resolve));
      }
    }
  }

  return {
    push,
    close() {
      closed = true;
      wake();
    },
    cancel(reason) {
      cancelled ??= reason;
      chunks = [];
      size = 0;
      wake();
    },
    get size() {
      return size;
    },
    get maxSize() {
      return maxSize;
    },
    [Symbol.asyncIterator]: iterate,
  };
}
