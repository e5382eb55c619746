import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BLOCK_CHARS, blockHashes, promptOf } from "../../../src/server/prefix-index/prompt-blocks.js";

const text = (n: number, seed = "a") => seed.repeat(n);

describe("a prompt's blocks", () => {
  it.each([
    ["shorter than a block", BLOCK_CHARS - 1, 0],
    ["one block", BLOCK_CHARS, 1],
    ["a block and a part (the part is not hashed)", BLOCK_CHARS + 10, 1],
    ["ten blocks", 10 * BLOCK_CHARS, 10],
  ])("%s: %i characters make %i blocks", (_, chars, blocks) => {
    expect(blockHashes(text(chars)).length).toBe(blocks);
  });

  it("are chained: a block's hash names its whole prefix, not only its own text", () => {
    const same = text(BLOCK_CHARS, "x");
    const [, second] = blockHashes(text(BLOCK_CHARS, "a") + same);
    const [, other] = blockHashes(text(BLOCK_CHARS, "b") + same);
    expect(second).not.toBe(other);
  });

  it("of two prompts agree exactly as far as their whole blocks of text agree", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 6 * BLOCK_CHARS }), fc.string({ maxLength: 3 * BLOCK_CHARS }), fc.string({ maxLength: 3 * BLOCK_CHARS }), (shared, a, b) => {
        const first = blockHashes(shared + a);
        const second = blockHashes(shared + b);
        const common = commonPrefix(shared + a, shared + b);
        const sameBlocks = Math.min(Math.floor(common / BLOCK_CHARS), first.length, second.length);
        for (let i = 0; i < sameBlocks; i++) expect(first[i]).toBe(second[i]);
        // Past the shared text a block differs (a 32-bit collision is possible, not in these runs).
        if (sameBlocks < Math.min(first.length, second.length)) expect(first[sameBlocks]).not.toBe(second[sameBlocks]);
      }),
    );
  });
});

describe("a request's prompt", () => {
  it("of a chat is its messages in order, roles and contents", () => {
    const ask = (messages: unknown) => promptOf("chat", { model: "m", messages });
    const system = { role: "system", content: "be brief" };
    expect(ask([system, { role: "user", content: "hi" }])).toBe(ask([system, { role: "user", content: "hi" }]));
    expect(ask([system, { role: "user", content: "hi" }])).not.toBe(ask([{ role: "user", content: "hi" }, system]));
    expect(ask([{ role: "user", content: "hi" }])).not.toBe(ask([{ role: "assistant", content: "hi" }]));
    // The next turn starts with the whole of the one before.
    const turn = ask([system, { role: "user", content: "hi" }])!;
    expect(ask([system, { role: "user", content: "hi" }, { role: "assistant", content: "hello" }])!.startsWith(turn)).toBe(true);
    // Content as parts is read too.
    expect(ask([{ role: "user", content: [{ type: "text", text: "hi" }] }])).toContain('"text":"hi"');
  });

  it("does not depend on other fields of the body", () => {
    const messages = [{ role: "user", content: "hi" }];
    expect(promptOf("chat", { messages, temperature: 0.5, stream: true })).toBe(promptOf("chat", { messages, max_tokens: 3 }));
  });

  it("of a completion is its prompt", () => {
    expect(promptOf("completions", { prompt: "once upon" })).toBe("once upon");
    expect(promptOf("completions", { prompt: [1, 2, 3] })).toBe("[1,2,3]");
  });

  it.each([
    ["a chat without messages", "chat", { prompt: "x" }],
    ["a chat whose messages are not a list", "chat", { messages: "hi" }],
    ["a completion without a prompt", "completions", { messages: [] }],
  ] as const)("is none for %s", (_, kind, body) => {
    expect(promptOf(kind, body)).toBeUndefined();
  });
});

function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
