// A bounded single-producer, single-consumer channel. A full channel makes `push` wait, which is
// how a slow bulk sender pauses the database reader; `cancel` wakes both sides when either gives up.

export interface Channel<T> extends AsyncIterable<T> {
  /** Resolves once the item is queued; waits while the channel is full. Rejects after cancel. */
  push(item: T): Promise<void>;
  /** No more items: the consumer drains what is queued, then its iteration ends. */
  close(): void;
  /** Stops both sides: pending and later pushes reject with `reason`, iteration ends. */
  cancel(reason: Error): void;
  /** Items queued right now. */
  readonly size: number;
  /** The largest `size` seen, to verify the bound. */
  readonly maxSize: number;
}

export function createChannel<T>(capacity: number): Channel<T> {
  if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`channel capacity must be a positive integer, got ${capacity}`);
  const items: T[] = [];
  let head = 0;
  let closed = false;
  let cancelled: Error | undefined;
  let maxSize = 0;
  let wakeProducer: (() => void) | undefined;
  let wakeConsumer: (() => void) | undefined;
  const size = () => items.length - head;

  const wake = () => {
    const p = wakeProducer;
    const c = wakeConsumer;
    wakeProducer = wakeConsumer = undefined;
    p?.();
    c?.();
  };

  async function push(item: T): Promise<void> {
    while (size() >= capacity && !cancelled) await new Promise<void>((resolve) => (wakeProducer = resolve));
    if (cancelled) throw cancelled;
    if (closed) throw new Error("push after close");
    items.push(item);
    maxSize = Math.max(maxSize, size());
    wake();
  }

  async function* iterate(): AsyncGenerator<T> {
    for (;;) {
      if (cancelled) return;
      if (size() > 0) {
        const item = items[head] as T;
        items[head++] = undefined as T;
        // Compact now and then so the backing array does not grow with the total row count.
        if (head > capacity) {
          items.splice(0, head);
          head = 0;
        }
        wake();
        yield item;
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
      items.length = 0;
      head = 0;
      wake();
    },
    get size() {
      return size();
    },
    get maxSize() {
      return maxSize;
    },
    [Symbol.asyncIterator]: iterate,
  };
}
