import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { PrefixIndex, type IndexedReplicas } from "../../../src/server/prefix-index/prefix-index.js";
import { refreshMsOf } from "../../../src/server/prefix-index/replica-blocks.js";

/** A prompt of `n` blocks (block hashes as the index gets them): prompts of one seed share their prefix. */
const prompt = (seed: number, n: number) => Array.from({ length: n }, (_, i) => seed * 100_000 + i);

/** A least-recently-sent list (most recent first) after `blocks` were sent: each touched from the last block to the first, the oldest dropped past maxBlocks. */
function sentTo(recent: readonly number[], blocks: readonly number[], maxBlocks: number): number[] {
  let list = [...recent];
  for (let b = blocks.length - 1; b >= 0; b--) list = [blocks[b]!, ...list.filter((hash) => hash !== blocks[b])];
  return list.slice(0, maxBlocks);
}

function clock() {
  let at = 1_000_000;
  return { now: () => at, pass: (ms: number) => (at += ms) };
}

describe("the prefix index", () => {
  it("answers how much of a prompt each replica holds: the longest prefix it was sent", () => {
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 60_000 });
    const replicas = index.replicas("e", ["a", "b", "c"]);
    const conversation = prompt(1, 10);
    index.learn(replicas, 0, conversation.slice(0, 4));
    index.learn(replicas, 1, conversation.slice(0, 7));
    expect(index.held(replicas, conversation)).toEqual([4, 7, 0]);
    expect(index.held(replicas, prompt(2, 10))).toEqual([0, 0, 0]);
    expect(index.held(index.replicas("other", ["a", "b"]), conversation)).toEqual([0, 0]);
  });

  it("keeps each endpoint's replicas apart", () => {
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 60_000 });
    index.learn(index.replicas("e1", ["a"]), 0, prompt(1, 3));
    expect(index.held(index.replicas("e2", ["a"]), prompt(1, 3))).toEqual([0]);
  });

  it("evicts the least recently sent blocks past maxBlocks, a prompt's tail before its head", () => {
    const index = new PrefixIndex({ maxBlocks: 10, ttlMs: 60_000 });
    const a = index.replicas("e", ["a"]);
    index.learn(a, 0, prompt(1, 6));
    index.learn(a, 0, prompt(2, 6));
    // 12 sent, 10 kept: the first prompt lost its last two blocks, not its first two.
    expect(index.size).toBe(10);
    expect(index.held(a, prompt(1, 6))).toEqual([4]);
    expect(index.held(a, prompt(2, 6))).toEqual([6]);
    // Sent again, a prompt is the most recent.
    index.learn(a, 0, prompt(1, 6));
    expect(index.held(a, prompt(2, 6))).toEqual([4]);
  });

  it("forgets a block not sent again within its time to live", () => {
    const time = clock();
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 1_000, now: time.now });
    const a = index.replicas("e", ["a"]);
    index.learn(a, 0, prompt(1, 4));
    time.pass(600);
    index.learn(a, 0, prompt(1, 2));
    time.pass(600);
    expect(index.held(a, prompt(1, 4))).toEqual([2]);
    time.pass(400);
    expect(index.held(a, prompt(1, 4))).toEqual([0]);
  });

  it("leaves a prompt sent again within refreshMs where it was: its new blocks go after it, as recent and as old as it", () => {
    const time = clock();
    const ttlMs = 100_000;
    expect(refreshMsOf(ttlMs)).toBe(1_000);
    const index = new PrefixIndex({ maxBlocks: 10, ttlMs, now: time.now });
    const a = index.replicas("e", ["a"]);
    index.learn(a, 0, prompt(1, 3));
    time.pass(100);
    index.learn(a, 0, prompt(2, 3));
    time.pass(100);
    // The first prompt's next turn: its held part, sent 200 ms ago, is not walked again.
    index.learn(a, 0, prompt(1, 5));
    expect(index.held(a, prompt(1, 5))).toEqual([5]);
    // 4 more blocks, 2 slots free: the least recent go, the first prompt's new tail (an exact LRU
    // would take the second prompt's).
    index.learn(a, 0, prompt(3, 4));
    expect(index.held(a, prompt(1, 5))).toEqual([3]);
    expect(index.held(a, prompt(2, 3))).toEqual([3]);
    // Past refreshMs, a prompt sent again is walked: the most recent again.
    time.pass(1_000);
    index.learn(a, 0, prompt(1, 3));
    index.learn(a, 0, prompt(4, 3));
    expect(index.held(a, prompt(1, 3))).toEqual([3]);
    expect(index.held(a, prompt(2, 3))).toEqual([0]);
  });

  it("forgets a prompt's blocks placed within refreshMs of its start with that start, at most refreshMs before their own time to live", () => {
    const time = clock();
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 10_000, now: time.now });
    const a = index.replicas("e", ["a"]);
    index.learn(a, 0, prompt(1, 3));
    time.pass(50);
    index.learn(a, 0, prompt(1, 5));
    time.pass(9_949);
    expect(index.held(a, prompt(1, 5))).toEqual([5]);
    time.pass(1);
    // All five at once: no block of its tail outlives its start, and the next learn drops them all.
    expect(index.held(a, prompt(1, 5))).toEqual([0]);
    expect(index.held(a, prompt(1, 5).slice(3))).toEqual([0]);
    index.learn(a, 0, prompt(2, 1));
    expect(index.size).toBe(1);
  });

  it("holds each prompt's blocks as a prefix, the last one sent whole, whatever the sends and the time between them", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100 }),
        fc.array(
          // asked: the send is told what the replica held of it, asked just before (as the proxy routes).
          fc.record({ seed: fc.integer({ min: 0, max: 3 }), blocks: fc.integer({ min: 0, max: 20 }), after: fc.oneof(fc.integer({ min: 0, max: 150 }), fc.integer({ min: 0, max: 4_000 })), asked: fc.boolean() }),
          { minLength: 1, maxLength: 40 },
        ),
        (maxBlocks, sends) => {
          // A time to live of 10 s, refreshMs 100 ms: some sends walked and some not, some blocks expired, some evicted.
          const time = clock();
          const ttlMs = 10_000;
          const index = new PrefixIndex({ maxBlocks, ttlMs, now: time.now });
          const a = index.replicas("e", ["a"]);
          const sentAt = new Map<number, { at: number; blocks: number }>();
          for (const send of sends) {
            time.pass(send.after);
            const blocks = prompt(send.seed, send.blocks);
            index.learn(a, 0, blocks, send.asked ? index.held(a, blocks)[0] : undefined);
            sentAt.set(send.seed, { at: time.now(), blocks: send.blocks });
            expect(index.held(a, blocks)).toEqual([Math.min(send.blocks, maxBlocks)]);
            expect(index.size).toBeLessThanOrEqual(maxBlocks);
            for (let seed = 0; seed <= 3; seed++) {
              const asked = prompt(seed, 20);
              const each = asked.map((hash) => index.held(a, [hash])[0]!);
              // Held blocks form a prefix: the binary search's answer is the scan's.
              const scanned = each.indexOf(0) < 0 ? each.length : each.indexOf(0);
              expect(each.slice(scanned).every((held) => held === 0)).toBe(true);
              expect(index.held(a, asked)).toEqual([scanned]);
              // Sent within the time to live less refreshMs, and nothing evicted: held whole.
              const last = sentAt.get(seed);
              if (last !== undefined && maxBlocks >= 4 * 20 && time.now() - last.at < ttlMs - refreshMsOf(ttlMs)) expect(scanned).toBeGreaterThanOrEqual(last.blocks);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it("drops what it holds for replicas that left routing, and endpoints nothing routes to", () => {
    const time = clock();
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 1_000, now: time.now });
    const before = index.replicas("e", ["a", "b"]);
    index.learn(before, 0, prompt(1, 4));
    index.learn(before, 1, prompt(1, 4));
    // The next directory answer: a left routing, c came in.
    const after = index.replicas("e", ["b", "c"]);
    expect(index.held(after, prompt(1, 4))).toEqual([4, 0]);
    expect(index.size).toBe(4);
    // The earlier answer's replicas are found again, not given back: a is forgotten.
    const again = index.replicas("e", before.names, before);
    expect(again).not.toBe(before);
    expect(index.held(again, prompt(1, 4))).toEqual([0, 4]);
    index.learn(index.replicas("gone", ["x"]), 0, prompt(3, 5));
    // Past the time to live and the sweep's period, any request sweeps what expired everywhere.
    time.pass(61_000);
    const later = index.replicas("e", ["b", "c"], after);
    expect(later).not.toBe(after);
    index.learn(later, 0, prompt(2, 1));
    expect(index.size).toBe(1);
  });

  it("gives a directory answer's replicas back while the index keeps all of them", () => {
    const time = clock();
    const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 100_000, now: time.now });
    const replicas = index.replicas("e", ["a", "b"]);
    index.learn(replicas, 0, prompt(1, 4));
    index.learn(replicas, 1, prompt(2, 4));
    // Another endpoint's answers, one of them a replica more, and a sweep that drops nothing.
    index.learn(index.replicas("f", ["a"]), 0, prompt(3, 4));
    time.pass(61_000);
    index.learn(index.replicas("f", ["a", "b"]), 1, prompt(3, 4));
    expect(index.replicas("e", replicas.names, replicas)).toBe(replicas);
    expect(index.held(replicas, prompt(1, 4))).toEqual([4, 0]);
  });

  it("learns through a directory answer's replicas given back into what the index holds, whatever answers and sweeps came between", () => {
    const names = ["a", "b", "c", "d"];
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({ answer: fc.constantFrom("e", "f"), names: fc.subarray(names, { minLength: 1 }) }),
            fc.record({ learnThrough: fc.nat(), at: fc.nat(), seed: fc.integer({ min: 0, max: 9 }) }),
            fc.record({ passMs: fc.integer({ min: 0, max: 70_000 }) }),
          ),
          { maxLength: 40 },
        ),
        (steps) => {
          const time = clock();
          const index = new PrefixIndex({ maxBlocks: 100, ttlMs: 30_000, now: time.now });
          const answers: IndexedReplicas[] = [];
          for (const step of steps) {
            if ("answer" in step) answers.push(index.replicas(step.answer, step.names));
            else if ("passMs" in step) time.pass(step.passMs);
            else if (answers.length > 0) {
              // As the proxy does: an answer kept, given back (or found again) when a request comes.
              const kept = answers[step.learnThrough % answers.length]!;
              const replicas = index.replicas(kept.endpoint, kept.names, kept);
              const at = step.at % replicas.names.length;
              index.learn(replicas, at, prompt(step.seed, 5));
              // The same replicas found anew (a new list of the same names) hold what was just learned.
              const fresh = index.replicas(kept.endpoint, [...kept.names]);
              expect(index.held(fresh, prompt(step.seed, 5))[at]).toBe(5);
            }
          }
        },
      ),
    );
  });

  it("holds at most maxBlocks per replica for any traffic", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.array(fc.record({ replica: fc.constantFrom("a", "b", "c"), seed: fc.integer({ min: 0, max: 20 }), blocks: fc.integer({ min: 0, max: 80 }) }), { maxLength: 60 }),
        (maxBlocks, sends) => {
          const index = new PrefixIndex({ maxBlocks, ttlMs: 60_000 });
          const names = ["a", "b", "c"];
          const replicas = index.replicas("e", names);
          for (const send of sends) index.learn(replicas, names.indexOf(send.replica), prompt(send.seed, send.blocks));
          expect(index.size).toBeLessThanOrEqual(3 * maxBlocks);
          for (let replica = 0; replica < names.length; replica++) {
            let held = 0;
            for (let seed = 0; seed <= 20; seed++) held += index.held(replicas, prompt(seed, 80))[replica]!;
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
          // A second between sends: each one walks its prompt (refreshMsOf, below), as an exact LRU does.
          const time = clock();
          const index = new PrefixIndex({ maxBlocks, ttlMs: 3_600_000, now: time.now });
          const a = index.replicas("e", ["a"]);
          const kept = new Map<number, number>();
          for (const send of sends) {
            time.pass(1_000);
            index.learn(a, 0, prompt(send.seed, send.blocks));
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
            expect(index.held(a, asked)).toEqual([scanned]);
          }
          const last = sends.at(-1)!;
          expect(index.held(a, prompt(last.seed, last.blocks))).toEqual([Math.min(last.blocks, maxBlocks)]);
        },
      ),
    );
  });

  it("keeps for each replica what its own least-recently-sent list keeps, replicas sharing blocks, leaving routing and coming back", () => {
    const names = ["a", "b", "c", "d"];
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.array(
          fc.oneof(
            // A seed's prompts sent to several replicas: the same blocks held by each.
            fc.record({ replica: fc.nat({ max: 3 }), seed: fc.integer({ min: 0, max: 3 }), blocks: fc.integer({ min: 0, max: 10 }), asked: fc.boolean() }),
            fc.record({ routing: fc.subarray(names, { minLength: 1 }) }),
          ),
          { maxLength: 50 },
        ),
        (maxBlocks, steps) => {
          const time = clock();
          const index = new PrefixIndex({ maxBlocks, ttlMs: 3_600_000, now: time.now });
          let replicas = index.replicas("e", names);
          // The model: per replica, most recently sent first.
          const recent = new Map<string, number[]>(names.map((name) => [name, []]));
          for (const step of steps) {
            if ("routing" in step) {
              // A new directory answer: the replicas left out are forgotten; one named again holds nothing.
              replicas = index.replicas("e", step.routing);
              for (const name of names) if (!step.routing.includes(name)) recent.set(name, []);
              continue;
            }
            const at = step.replica % replicas.names.length;
            const blocks = prompt(step.seed, step.blocks);
            time.pass(1_000);
            index.learn(replicas, at, blocks, step.asked ? index.held(replicas, blocks)[at] : undefined);
            recent.set(replicas.names[at]!, sentTo(recent.get(replicas.names[at]!)!, blocks, maxBlocks));
            expect(index.size).toBe(names.reduce((sum, name) => sum + recent.get(name)!.length, 0));
            for (let seed = 0; seed <= 3; seed++) {
              const asked = prompt(seed, 10);
              const scanned = replicas.names.map((name) => {
                let held = 0;
                while (held < asked.length && recent.get(name)!.includes(asked[held]!)) held++;
                return held;
              });
              expect(index.held(replicas, asked), `seed ${seed}`).toEqual(scanned);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it("keeps what a least-recently-sent list keeps, for prompts that share a start and end apart", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.array(fc.record({ seed: fc.integer({ min: 0, max: 2 }), shared: fc.integer({ min: 0, max: 8 }), tail: fc.integer({ min: 0, max: 5 }), tailSeed: fc.integer({ min: 0, max: 3 }) }), { maxLength: 40 }),
        (maxBlocks, sends) => {
          const time = clock();
          const index = new PrefixIndex({ maxBlocks, ttlMs: 3_600_000, now: time.now });
          const a = index.replicas("e", ["a"]);
          // The model: most recently sent first, each prompt touched from its last block to its first.
          let recent: number[] = [];
          const seen = new Set<number>();
          for (const send of sends) {
            const tail = Array.from({ length: send.tail }, (_, i) => 1_000_000 + send.tailSeed * 1_000 + send.seed * 100 + i);
            const blocks = [...prompt(send.seed, send.shared), ...tail];
            time.pass(1_000);
            index.learn(a, 0, blocks);
            recent = sentTo(recent, blocks, maxBlocks);
            blocks.forEach((hash) => seen.add(hash));
            for (const hash of seen) expect(index.held(a, [hash]), `block ${hash}`).toEqual([recent.includes(hash) ? 1 : 0]);
            expect(index.size).toBe(recent.length);
          }
        },
      ),
    );
  });
});
