import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { PrefixIndex } from "../../../src/server/prefix-index/prefix-index.js";

/** A prompt of `n` blocks (block hashes as the index gets them): prompts of one seed share their prefix. */
const prompt = (seed: number, n: number) => Array.from({ length: n }, (_, i) => seed * 100_000 + i);

function clock() {
  let at = 1_000_000;
  return { now: () => at, pass: (ms: number) => (at += ms) };
}

describe("the prefix index", () => {
  it("answers how much of a prompt each replica holds: the longest prefix it was sent", () => {
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 60_000 });
    const conversation = prompt(1, 10);
    index.learn("e", "a", conversation.slice(0, 4));
    index.learn("e", "b", conversation.slice(0, 7));
    expect(index.held("e", ["a", "b", "c"], conversation)).toEqual([4, 7, 0]);
    expect(index.held("e", ["a", "b"], prompt(2, 10))).toEqual([0, 0]);
    expect(index.held("other", ["a", "b"], conversation)).toEqual([0, 0]);
  });

  it("keeps each endpoint's replicas apart", () => {
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 60_000 });
    index.learn("e1", "a", prompt(1, 3));
    expect(index.held("e2", ["a"], prompt(1, 3))).toEqual([0]);
  });

  it("evicts the least recently sent blocks past maxBlocks, a prompt's tail before its head", () => {
    const index = new PrefixIndex({ maxBlocks: 10, ttlMs: 60_000 });
    index.learn("e", "a", prompt(1, 6));
    index.learn("e", "a", prompt(2, 6));
    // 12 sent, 10 kept: the first prompt lost its last two blocks, not its first two.
    expect(index.size).toBe(10);
    expect(index.held("e", ["a"], prompt(1, 6))).toEqual([4]);
    expect(index.held("e", ["a"], prompt(2, 6))).toEqual([6]);
    // Sent again, a prompt is the most recent.
    index.learn("e", "a", prompt(1, 6));
    expect(index.held("e", ["a"], prompt(2, 6))).toEqual([4]);
  });

  it("forgets a block not sent again within its time to live", () => {
    const time = clock();
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 1_000, now: time.now });
    index.learn("e", "a", prompt(1, 4));
    time.pass(600);
    index.learn("e", "a", prompt(1, 2));
    time.pass(600);
    expect(index.held("e", ["a"], prompt(1, 4))).toEqual([2]);
    time.pass(400);
    expect(index.held("e", ["a"], prompt(1, 4))).toEqual([0]);
  });

  it("drops what it holds for replicas that left routing, and endpoints nothing routes to", () => {
    const time = clock();
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 1_000, now: time.now });
    index.learn("e", "a", prompt(1, 4));
    index.learn("e", "b", prompt(1, 4));
    index.retain("e", ["b", "c"]);
    expect(index.held("e", ["a", "b"], prompt(1, 4))).toEqual([0, 4]);
    expect(index.size).toBe(4);
    index.learn("gone", "x", prompt(3, 5));
    // Past the time to live and the sweep's period, any learning sweeps what expired everywhere.
    time.pass(61_000);
    index.learn("e", "b", prompt(2, 1));
    expect(index.size).toBe(1);
  });

  it("holds at most maxBlocks per replica for any traffic", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.array(fc.record({ replica: fc.constantFrom("a", "b", "c"), seed: fc.integer({ min: 0, max: 20 }), blocks: fc.integer({ min: 0, max: 80 }) }), { maxLength: 60 }),
        (maxBlocks, sends) => {
          const index = new PrefixIndex({ maxBlocks, ttlMs: 60_000 });
          for (const send of sends) index.learn("e", send.replica, prompt(send.seed, send.blocks));
          expect(index.size).toBeLessThanOrEqual(3 * maxBlocks);
          for (const replica of ["a", "b", "c"]) {
            let held = 0;
            for (let seed = 0; seed <= 20; seed++) held += index.held("e", [replica], prompt(seed, 80))[0]!;
            expect(held).toBeLessThanOrEqual(maxBlocks);
          }
        },
      ),
    );
  });

  it("answers the longest prefix held, as a scan of every block would, and what was sent last is held whole", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.array(fc.record({ seed: fc.integer({ min: 0, max: 5 }), blocks: fc.integer({ min: 0, max: 30 }) }), { minLength: 1, maxLength: 30 }),
        (maxBlocks, sends) => {
          const index = new PrefixIndex({ maxBlocks, ttlMs: 60_000 });
          const kept = new Map<number, number>();
          for (const send of sends) {
            index.learn("e", "a", prompt(send.seed, send.blocks));
            // A model of the LRU: block -> last sent (a counter), the oldest dropped past maxBlocks.
            for (let b = send.blocks - 1; b >= 0; b--) {
              const hash = send.seed * 100_000 + b;
              kept.delete(hash);
              kept.set(hash, 0);
            }
            while (kept.size > maxBlocks) kept.delete(kept.keys().next().value!);
          }
          for (let seed = 0; seed <= 5; seed++) {
            const asked = prompt(seed, 30);
            let scanned = 0;
            while (scanned < asked.length && kept.has(asked[scanned]!)) scanned++;
            expect(index.held("e", ["a"], asked)).toEqual([scanned]);
          }
          const last = sends.at(-1)!;
          expect(index.held("e", ["a"], prompt(last.seed, last.blocks))).toEqual([Math.min(last.blocks, maxBlocks)]);
        },
      ),
    );
  });

  it("keeps what a least-recently-sent list keeps, for prompts that share a start and end apart", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.array(fc.record({ seed: fc.integer({ min: 0, max: 2 }), shared: fc.integer({ min: 0, max: 8 }), tail: fc.integer({ min: 0, max: 5 }), tailSeed: fc.integer({ min: 0, max: 3 }) }), { maxLength: 40 }),
        (maxBlocks, sends) => {
          const index = new PrefixIndex({ maxBlocks, ttlMs: 60_000 });
          // The model: most recently sent first, each prompt touched from its last block to its first.
          let recent: number[] = [];
          const seen = new Set<number>();
          for (const send of sends) {
            const tail = Array.from({ length: send.tail }, (_, i) => 1_000_000 + send.tailSeed * 1_000 + send.seed * 100 + i);
            const blocks = [...prompt(send.seed, send.shared), ...tail];
            index.learn("e", "a", blocks);
            for (let b = blocks.length - 1; b >= 0; b--) recent = [blocks[b]!, ...recent.filter((hash) => hash !== blocks[b])];
            recent = recent.slice(0, maxBlocks);
            blocks.forEach((hash) => seen.add(hash));
            for (const hash of seen) expect(index.held("e", ["a"], [hash]), `block ${hash}`).toEqual([recent.includes(hash) ? 1 : 0]);
            expect(index.size).toBe(recent.length);
          }
        },
      ),
    );
  });
});
