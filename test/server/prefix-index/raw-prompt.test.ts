import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BLOCK_CHARS, blockHashes, promptBlocks, promptOf, type PromptKind } from "../../../src/server/prefix-index/prompt-blocks.js";
import { readRawPrompt, UNREAD } from "../../../src/server/prefix-index/raw-prompt.js";

// The prompt's blocks read from the raw body must be those of the parsed body, whatever its
// spelling: escapes, non-ASCII text, key order, white space. Where the reader gives up, the proxy
// parses the body, so giving up is never wrong; answering differently is.

/** What the proxy computed before the raw reader: the parsed body's prompt, hashed whole. */
const parsedBlocks = (kind: PromptKind, text: string, maxBlocks = Infinity) => {
  const prompt = promptOf(kind, JSON.parse(text) as Record<string, unknown>);
  return prompt === undefined ? undefined : blockHashes(prompt, maxBlocks);
};
/** The raw reader's blocks of a body, or UNREAD. */
const rawPromptBlocks = (kind: PromptKind, bytes: Buffer, maxBlocks = Infinity) => {
  const read = readRawPrompt(kind, bytes, maxBlocks);
  return read === UNREAD ? UNREAD : read.blocks;
};
const raw = (kind: PromptKind, text: string, maxBlocks = Infinity) => rawPromptBlocks(kind, Buffer.from(text), maxBlocks);

/** JSON with every character past ASCII and every slash escaped, as some clients send it. */
const escapedJson = (value: unknown) => JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).replace(/\//g, "\\/");

const long = `You are a support assistant; answer in two sentences. ${"Keep to the policy. ".repeat(20)}`;
const anyText = fc.oneof(fc.string({ maxLength: 3 * BLOCK_CHARS }), fc.string({ unit: "binary", maxLength: 3 * BLOCK_CHARS }), fc.constant(long));
const message = fc.record({ role: fc.constantFrom("system", "user", "assistant", "tool", "ünï"), content: anyText, name: fc.option(fc.string(), { nil: undefined }) }, { requiredKeys: ["role", "content"] });

describe("a prompt's blocks read from the raw body", () => {
  it("are those of the parsed body, for any chat spelled any way", () => {
    fc.assert(
      fc.property(fc.array(message, { maxLength: 5 }), fc.boolean(), fc.boolean(), fc.boolean(), (messages, escaped, contentFirst, spaced) => {
        const ordered = contentFirst ? messages.map(({ role, content, ...rest }) => ({ ...rest, content, role })) : messages;
        const body = { model: "m/1", temperature: 0.5, n: -1.5e3, stop: ["\n", null, true, false], messages: ordered, max_tokens: 7 };
        let text = escaped ? escapedJson(body) : JSON.stringify(body);
        if (spaced) text = JSON.stringify(JSON.parse(text), null, "\t");
        const read = raw("chat", text);
        expect(read).not.toBe(UNREAD);
        expect(read).toEqual(parsedBlocks("chat", text));
        expect(read).toEqual(promptBlocks("chat", JSON.parse(text) as Record<string, unknown>));
      }),
      { numRuns: 300 },
    );
  });

  it("are the same for two bodies with the same messages, escaped or not", () => {
    const messages = [
      { role: "system", content: `${long} "quoted" \\ back/slash, tab\t, 한국어 상품, emoji 🎁` },
      { role: "user", content: "Where is my order? \u0000" },
    ];
    const plain = raw("chat", JSON.stringify({ messages }));
    expect(plain).toBeInstanceOf(Array);
    expect((plain as number[]).length).toBeGreaterThan(3);
    expect(raw("chat", escapedJson({ stream: false, messages }))).toEqual(plain);
    expect(raw("chat", `{ "messages" : ${JSON.stringify(messages.map(({ role, content }) => ({ content, role })))} }`)).toEqual(plain);
    // A message that differs only past the shared blocks keeps them.
    const other = raw("chat", JSON.stringify({ messages: [messages[0], { role: "user", content: "Something else" }] })) as number[];
    expect(other.slice(0, 3)).toEqual((plain as number[]).slice(0, 3));
  });

  it("come with whether the body's top level has the key asked about, and only its top level", () => {
    const messages = [{ role: "user", content: long }];
    const stream = Buffer.from("stream");
    const read = (body: unknown) => readRawPrompt("chat", Buffer.from(JSON.stringify(body)), Infinity, stream);
    const blocks = parsedBlocks("chat", JSON.stringify({ messages }));
    expect(read({ messages, stream: true })).toEqual({ blocks, keyFound: true });
    expect(read({ stream: false, messages })).toEqual({ blocks, keyFound: true });
    // Named deeper, or as a value, or not asked about: not found.
    expect(read({ messages, metadata: { stream: 1 }, model: "stream" })).toEqual({ blocks, keyFound: false });
    expect(readRawPrompt("chat", Buffer.from(JSON.stringify({ messages, stream: true })))).toEqual({ blocks, keyFound: false });
  });

  it("are those of the parsed body when its text is not valid UTF-8", () => {
    const prompt = "안녕하세요 ".repeat(20);
    for (const bad of [[0xe2, 0x82], [0xff], [0xc3], [0xed, 0xa0, 0x80], [0xf0, 0x9f, 0x8e]]) {
      const body = Buffer.concat([Buffer.from(`{"messages": [{"role": "user", "content": "${prompt}`), Buffer.from(bad), Buffer.from(`${prompt}"}]}`)]);
      expect(rawPromptBlocks("chat", body)).toEqual(parsedBlocks("chat", body.toString("utf8")));
    }
  });

  it("of a completion are its prompt's", () => {
    fc.assert(
      fc.property(anyText, fc.boolean(), (prompt, escaped) => {
        const text = escaped ? escapedJson({ prompt, model: "m" }) : JSON.stringify({ model: "m", prompt });
        expect(raw("completions", text)).toEqual(parsedBlocks("completions", text));
      }),
    );
  });

  it("stop at maxBlocks, the first ones unchanged", () => {
    const text = JSON.stringify({ messages: [{ role: "user", content: long.repeat(3) }] });
    const all = raw("chat", text) as number[];
    expect(all.length).toBeGreaterThan(5);
    expect(raw("chat", text, 5)).toEqual(all.slice(0, 5));
    expect(raw("chat", text, 5)).toEqual(parsedBlocks("chat", text, 5));
  });

  it.each([
    ["no messages", "chat", { model: "m" }],
    ["no prompt", "completions", { messages: [] }],
    ["no messages in it", "chat", { messages: [] }],
  ] as const)("are none when the body has %s", (_, kind, body) => {
    expect(raw(kind, JSON.stringify(body))).toEqual(parsedBlocks(kind, JSON.stringify(body)));
  });

  it.each([
    ["content as parts", { messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }] }],
    ["a message that is not an object", { messages: ["hi"] }],
    ["a role that is not a string", { messages: [{ role: 1, content: "hi" }] }],
    ["messages that are not a list", { messages: "hi" }],
  ])("gives up on %s: the body is parsed", (_, body) => {
    expect(raw("chat", JSON.stringify(body))).toBe(UNREAD);
  });

  it.each([
    ["a key spelled with escapes", '{"\\u006dessages": [{"role": "user", "content": "hi"}]}'],
    ["messages given twice", '{"messages": [], "messages": [{"role": "user", "content": "hi"}]}'],
    ["not JSON", '{"messages": [{"role": "user", "content": "hi"}]'],
    ["something after the object", '{"messages": []} {}'],
    ["a control character in a string", '{"messages": [{"role": "user", "content": "h\ti"}]}'],
    ["a control character in a skipped string", '{"model": "m\n", "messages": []}'],
    ["a bad escape", '{"messages": [{"role": "user", "content": "h\\xi"}]}'],
    ["a bad number", '{"max_tokens": 01, "messages": []}'],
    ["a bad literal", '{"stream": nul, "messages": []}'],
    ["a trailing comma", '{"messages": [],}'],
    ["a list", "[]"],
    ["nesting deeper than the stack", `{"x": ${"[".repeat(200_000)}${"]".repeat(200_000)}, "messages": []}`],
  ])("gives up on %s: the body is parsed", (_, text) => {
    expect(raw("chat", text)).toBe(UNREAD);
  });
});
