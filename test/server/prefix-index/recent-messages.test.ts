import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BLOCK_CHARS, BlockHasher, blockHashes, promptOf } from "../../../src/server/prefix-index/prompt-blocks.js";
import { readRawPrompt, UNREAD } from "../../../src/server/prefix-index/raw-prompt.js";
import { KEPT_BYTES, KEPT_MESSAGES, RecentMessages } from "../../../src/server/prefix-index/recent-messages.js";

// A body read with the recent messages takes up what an earlier body shared with it, byte for
// byte: its blocks must be those of the parsed body whatever was read before it, and the memory
// must really be taken up (else it only costs).

type Message = { role: string; content: string };

const parsedBlocks = (text: string, maxBlocks = Infinity) => blockHashes(promptOf("chat", JSON.parse(text) as Record<string, unknown>)!, maxBlocks);
const readWith = (recent: RecentMessages | undefined, text: string, maxBlocks = Infinity) => {
  const read = readRawPrompt("chat", Buffer.from(text), maxBlocks, undefined, recent);
  return read === UNREAD ? UNREAD : read.blocks;
};
/** How many messages of `text` the memory takes up. */
const taken = (recent: RecentMessages, text: string) => {
  const bytes = Buffer.from(text);
  return recent.recall(bytes, bytes.indexOf("[") + 1, new BlockHasher(recent.maxBlocks))?.taken;
};
const chat = (messages: Message[], extra: object = {}) => JSON.stringify({ model: "m", ...extra, messages, max_tokens: 8 });

const system = `You are a support assistant; answer in two sentences. ${"Keep to the policy. ".repeat(20)}`;
const text = fc.oneof(fc.string({ maxLength: 2 * BLOCK_CHARS }), fc.string({ unit: "binary", maxLength: BLOCK_CHARS }), fc.constant(system));
const message = fc.record({ role: fc.constantFrom("system", "user", "assistant"), content: text });

describe("a prompt read with the recent messages", () => {
  it("has the parsed body's blocks, whatever bodies came before it", () => {
    // Conversations that grow, branch and repeat: each body is an earlier one's messages, cut
    // somewhere, with messages of its own after them; spelled plainly, spaced or with its keys
    // in another order, and read under one memory with a few blocks at most or all of them.
    const turn = fc.record({ from: fc.nat(), keep: fc.nat(), added: fc.array(message, { maxLength: 3 }), spelling: fc.constantFrom("plain", "spaced", "content first") });
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 3 }), fc.array(turn, { maxLength: 12 }), fc.constantFrom(Infinity, 3), (first, turns, maxBlocks) => {
        const recent = new RecentMessages(maxBlocks);
        const conversations: Message[][] = [first];
        for (const { from, keep, added, spelling } of [{ from: 0, keep: first.length, added: [], spelling: "plain" }, ...turns]) {
          const earlier = conversations[from % conversations.length]!;
          const messages = [...earlier.slice(0, keep % (earlier.length + 1)), ...added];
          conversations.push(messages);
          const ordered = spelling === "content first" ? messages.map(({ role, content }) => ({ content, role })) : messages;
          const body = spelling === "spaced" ? JSON.stringify(JSON.parse(chat(messages)), null, 1) : chat(ordered as Message[]);
          expect(readWith(recent, body, maxBlocks)).toEqual(parsedBlocks(body, maxBlocks));
        }
      }),
      { numRuns: 300 },
    );
  });

  it("takes up the previous turn's messages: its conversation's, or another's with the same system prompt", () => {
    const recent = new RecentMessages(Infinity);
    const turn1 = [
      { role: "system", content: system },
      { role: "user", content: "Where is my order?" },
    ];
    const turn2 = [...turn1, { role: "assistant", content: "On its way." }, { role: "user", content: "When will it come?" }];
    const other = [turn1[0]!, { role: "user", content: "Can I return it?" }];
    expect(taken(recent, chat(turn1))).toBe(0);
    readWith(recent, chat(turn1));
    expect(taken(recent, chat(turn1))).toBe(2);
    expect(taken(recent, chat(turn2))).toBe(2);
    // Other keys before the messages, and other white space around them, change nothing.
    expect(taken(recent, JSON.stringify({ stream: true, messages: turn2 }))).toBe(2);
    readWith(recent, chat(turn2));
    expect(taken(recent, chat(turn2))).toBe(4);
    // A body that is the kept one's prefix leaves it kept.
    readWith(recent, chat(turn1));
    expect(taken(recent, chat(turn2))).toBe(4);
    // A conversation branching from it shares its system prompt, and is kept in its place.
    expect(taken(recent, chat(other))).toBe(1);
    readWith(recent, chat(other));
    expect(taken(recent, chat(other))).toBe(2);
    expect(taken(recent, chat(turn2))).toBe(1);
    expect(readWith(recent, chat(turn2))).toEqual(parsedBlocks(chat(turn2)));
  });

  it("gives a body read again whole the kept blocks themselves, and writes no block into them", () => {
    // A repeated body feeds the hasher nothing: its blocks are the kept ones, not a copy. A body
    // that goes on past them copies them first, so the kept blocks stay as they were.
    const recent = new RecentMessages(Infinity);
    const turn1 = [
      { role: "system", content: system },
      { role: "user", content: "Where is my order?" },
    ];
    readWith(recent, chat(turn1));
    const again = readWith(recent, chat(turn1));
    expect(readWith(recent, chat(turn1))).toBe(again);
    const kept = [...(again as number[])];
    const turn2 = [...turn1, { role: "assistant", content: "On its way." }, { role: "user", content: `When will it come? ${"Soon, I hope. ".repeat(20)}` }];
    expect(readWith(recent, chat(turn2))).toEqual(parsedBlocks(chat(turn2)));
    expect(again).toEqual(kept);
    expect(again).toEqual(parsedBlocks(chat(turn1)));
  });

  it("keeps conversations whose keys share a set, each taken up on its next turn", () => {
    // Sixteen conversations, each with a system prompt of its own: two of them share a set (a
    // slot of their own each would have made them push each other out on every turn).
    const recent = new RecentMessages(Infinity);
    const turns = Array.from({ length: 16 }, (_, i) => [
      { role: "system", content: `Conversation ${i + 1}. ${system}` },
      { role: "user", content: "Where is my order?" },
    ]);
    for (const turn of turns) readWith(recent, chat(turn));
    for (const turn of turns) expect(taken(recent, chat([...turn, { role: "assistant", content: "On its way." }]))).toBe(2);
  });

  it("keeps no more than KEPT_MESSAGES of a body's messages, and reads the rest", () => {
    const recent = new RecentMessages(Infinity);
    const messages = Array.from({ length: KEPT_MESSAGES + 10 }, (_, i) => ({ role: i === 0 ? "system" : "user", content: i === 0 ? system : `turn ${i}` }));
    readWith(recent, chat(messages.slice(0, 100)));
    expect(taken(recent, chat(messages))).toBe(100);
    readWith(recent, chat(messages));
    expect(taken(recent, chat(messages))).toBe(KEPT_MESSAGES);
    expect(readWith(recent, chat(messages))).toEqual(parsedBlocks(chat(messages)));
  });

  it("keeps no more than KEPT_BYTES of a body's messages, and reads the rest", () => {
    const recent = new RecentMessages(Infinity);
    const big = "x".repeat(KEPT_BYTES / 2);
    const messages = [
      { role: "system", content: big },
      { role: "user", content: big },
      { role: "user", content: big },
    ];
    readWith(recent, chat(messages));
    expect(taken(recent, chat(messages))).toBe(1);
    expect(readWith(recent, chat(messages))).toEqual(parsedBlocks(chat(messages)));
  });

  it("remembers no body it could not read whole, nor one too short to name", () => {
    const recent = new RecentMessages(Infinity);
    const messages = [{ role: "system", content: system }];
    const notJson = `${chat(messages)},`;
    expect(readWith(recent, notJson)).toBe(UNREAD);
    expect(taken(recent, chat(messages))).toBe(0);
    const short = chat([{ role: "user", content: "hi" }]);
    readWith(recent, short);
    expect(taken(recent, short)).toBeUndefined();
  });

  it("is not used under another block limit than its own", () => {
    const recent = new RecentMessages(3);
    const body = chat([{ role: "system", content: system.repeat(3) }]);
    expect(readWith(recent, body, 3)).toEqual(parsedBlocks(body, 3));
    expect(taken(recent, body)).toBe(1);
    expect(readWith(recent, body, Infinity)).toEqual(parsedBlocks(body));
  });
});
