import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BLOCK_CHARS, BlockHasher, blockHashes, promptBlocks, promptOf } from "../../../src/server/prefix-index/prompt-blocks.js";

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

describe("the block hasher", () => {
  it("gives the same blocks however the text is cut in pieces, strings or ASCII bytes", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 5 * BLOCK_CHARS }), fc.array(fc.nat(), { maxLength: 8 }), (text, cuts) => {
        const hasher = new BlockHasher();
        const at = [0, ...cuts.map((c) => c % (text.length + 1)).sort((a, b) => a - b), text.length];
        at.slice(1).forEach((to, i) => {
          const piece = text.slice(at[i], to);
          const bytes = Buffer.from(piece, "latin1");
          // ASCII pieces go in as bytes, as a raw body's strings do; the rest as strings.
          if (!/^[\x20-\x7f]*$/.test(piece) || !hasher.addAscii(bytes, 0, bytes.length)) hasher.addString(piece);
        });
        expect(hasher.blocks()).toEqual(blockHashes(text));
      }),
    );
  });

  it("takes ASCII text as bytes wherever a piece begins or ends within a step", () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.integer({ min: 0x20, max: 0x7f }).map((c) => String.fromCharCode(c)), maxLength: 3 * BLOCK_CHARS }), fc.array(fc.nat(), { maxLength: 8 }), (text, cuts) => {
        const hasher = new BlockHasher();
        const at = [0, ...cuts.map((c) => c % (text.length + 1)).sort((a, b) => a - b), text.length];
        for (let i = 1; i < at.length; i++) expect(hasher.addAscii(Buffer.from(text), at[i - 1]!, at[i]!)).toBe(true);
        expect(hasher.blocks()).toEqual(blockHashes(text));
      }),
    );
  });

  it("refuses bytes that are not ASCII text (a control character or past 0x7f), and takes nothing of them", () => {
    for (const byte of [0x00, 0x1f, 0x80, 0xff]) {
      const hasher = new BlockHasher();
      const bytes = Buffer.alloc(3 * BLOCK_CHARS, "a");
      bytes[BLOCK_CHARS + 5] = byte;
      expect(hasher.addAscii(bytes, 0, bytes.length)).toBe(false);
      expect(hasher.blocks()).toEqual([]);
    }
  });
});

describe("a request's prompt", () => {
  it("gives the same blocks read from its pieces as hashed whole", () => {
    const content = fc.oneof(fc.string({ unit: "binary", maxLength: 2 * BLOCK_CHARS }), fc.constant(null), fc.constant(undefined), fc.array(fc.record({ type: fc.constant("text"), text: fc.string() }), { maxLength: 2 }));
    const message = fc.oneof(fc.record({ role: fc.oneof(fc.string(), fc.constant(3)), content }), fc.constant("not an object"), fc.constant(null));
    fc.assert(
      fc.property(fc.array(message, { maxLength: 6 }), fc.integer({ min: 1, max: 8 }), (messages, maxBlocks) => {
        const body = { messages } as Record<string, unknown>;
        expect(promptBlocks("chat", body)).toEqual(blockHashes(promptOf("chat", body)!));
        expect(promptBlocks("chat", body, maxBlocks)).toEqual(blockHashes(promptOf("chat", body)!).slice(0, maxBlocks));
      }),
    );
  });


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
