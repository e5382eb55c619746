import { describe, expect, it } from "vitest";
import { createChannel } from "../../../src/indexing/pipeline/channel.js";

describe("bounded channel", () => {
  it("makes the producer wait while it is full and delivers every item in order", async () => {
    const channel = createChannel<number[]>(3);
    let pushed = 0;
    const producer = (async () => {
      for (let i = 0; i < 10; i++) {
        await channel.push([i]);
        pushed++;
      }
      channel.close();
    })();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(pushed).toBe(3);
    expect(channel.size).toBe(3);

    const received: number[] = [];
    for await (const chunk of channel) received.push(...chunk);
    await producer;
    expect(received).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(channel.maxSize).toBe(3);
  });

  it("rejects a waiting push and ends iteration when cancelled", async () => {
    const channel = createChannel<number[]>(1);
    await channel.push([1]);
    const waiting = channel.push([2]);
    channel.cancel(new Error("stop"));
    await expect(waiting).rejects.toThrow("stop");
    const received: number[] = [];
    for await (const chunk of channel) received.push(...chunk);
    expect(received).toEqual([]);
  });

  it("counts its capacity in items and queues a chunk only when it fits", async () => {
    const channel = createChannel<number[]>(5);
    await channel.push([1, 2, 3]);
    let queued = false;
    const waiting = channel.push([4, 5, 6]).then(() => (queued = true));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(queued).toBe(false);
    expect(channel.size).toBe(3);
    const chunks = channel[Symbol.asyncIterator]();
    expect((await chunks.next()).value).toEqual([1, 2, 3]);
    await waiting;
    expect(channel.size).toBe(3);
    expect(channel.maxSize).toBe(3);
  });

  it("takes a chunk larger than its capacity into an empty channel, alone", async () => {
    const channel = createChannel<number[]>(2);
    await channel.push([1, 2, 3]);
    expect(channel.size).toBe(3);
  });

  it("refuses a capacity below one", () => {
    expect(() => createChannel(0)).toThrow(RangeError);
  });
});
