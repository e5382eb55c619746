import { describe, expect, it } from "vitest";
import { readCompletion } from "../../../src/server/proxy/completion-body.js";
import { BlockHasher, blockHashes, promptOf } from "../../../src/server/prefix-index/prompt-blocks.js";
import { RecentMessages } from "../../../src/server/prefix-index/recent-messages.js";

// A completion's body read once for both things the proxy wants of it: whether it streams, and
// (for an endpoint routed by prefix) its prompt's blocks.

const messages = [
  { role: "system", content: "be brief" },
  { role: "user", content: "hi" },
];
const bytes = (body: unknown) => Buffer.from(typeof body === "string" ? body : JSON.stringify(body));

describe("a completion's body", () => {
  it("gives its stream plan and its prompt from one parse", () => {
    const read = readCompletion("chat", bytes({ messages, stream: true }), { promptBlocks: 100 });
    expect(read.plan?.first.body).toMatchObject({ messages, stream: true });
    expect(read.blocks).toEqual(blockHashes(promptOf("chat", { messages })!));
  });

  it("gives the plan and the prompt of a streamed one whose prompt is long, its blocks as parsed", () => {
    const long = [{ role: "system", content: "Keep to the policy. ".repeat(50) }, ...messages];
    const read = readCompletion("chat", bytes({ model: "m", messages: long, stream: true, max_tokens: 9 }), { promptBlocks: 100 });
    expect(read.plan?.first.body).toMatchObject({ messages: long, stream: true });
    expect(read.blocks).toEqual(blockHashes(promptOf("chat", { messages: long })!));
    expect(read.blocks!.length).toBeGreaterThan(10);
  });

  it("reads one that names stream only below its top level as not streamed, its prompt from the raw bytes", () => {
    const body = { messages: [{ role: "user", content: "once upon a time ".repeat(20), stream: true }], model: "stream" };
    expect(readCompletion("chat", bytes(body), { promptBlocks: 100 })).toEqual({ plan: undefined, blocks: blockHashes(promptOf("chat", body)!) });
    expect(readCompletion("chat", bytes({ ...body, stream: false }), { promptBlocks: 100 })).toEqual({ plan: undefined, blocks: blockHashes(promptOf("chat", body)!) });
  });

  it("reads a chat's messages with the recent messages it is given, and leaves them there for the next turn", () => {
    const recent = new RecentMessages(100);
    const turn = [{ role: "system", content: "Keep to the policy. ".repeat(50) }, ...messages];
    for (const stream of [false, true]) {
      const body = bytes({ model: "m", messages: turn, stream });
      expect(readCompletion("chat", body, { promptBlocks: 100, recentMessages: recent }).blocks).toEqual(blockHashes(promptOf("chat", { messages: turn })!).slice(0, 100));
      expect(recent.recall(body, body.indexOf("[") + 1, new BlockHasher(100))?.taken).toBe(turn.length);
    }
  });

  it("gives the prompt of one not streamed, when asked for it", () => {
    const prompt = "once upon a time ".repeat(20);
    expect(readCompletion("completions", bytes({ prompt }), { promptBlocks: 100 })).toEqual({ plan: undefined, blocks: blockHashes(prompt) });
    expect(readCompletion("completions", bytes({ prompt }), { promptBlocks: 2 })).toEqual({ plan: undefined, blocks: blockHashes(prompt).slice(0, 2) });
    expect(readCompletion("completions", bytes({ prompt }))).toEqual({ plan: undefined, blocks: undefined });
    // Read from the raw bytes or parsed (a key's admission parses it for max_tokens): the same blocks.
    expect(readCompletion("completions", bytes({ prompt, max_tokens: 3 }), { promptBlocks: 100, maxTokens: true })).toEqual({ plan: undefined, blocks: blockHashes(prompt), maxTokens: 3 });
  });

  it("gives max_tokens, else max_completion_tokens, when a key's admission asks for it", () => {
    expect(readCompletion("chat", bytes({ messages, max_tokens: 7, max_completion_tokens: 9 }), { maxTokens: true }).maxTokens).toBe(7);
    expect(readCompletion("chat", bytes({ messages, max_completion_tokens: 9 }), { maxTokens: true }).maxTokens).toBe(9);
    expect(readCompletion("chat", bytes({ messages, max_tokens: -1 }), { maxTokens: true }).maxTokens).toBeUndefined();
    expect(readCompletion("chat", bytes({ messages, max_tokens: 7 })).maxTokens).toBeUndefined();
  });

  it.each([
    ["not JSON", "{ messages"],
    ["a JSON list", [messages]],
    ["no messages", { model: "m" }],
    ["JSON with a stray control character", '{"messages": [{"role": "user", "content": "h\ti"}]}'],
  ])("routes as before when it is %s: no prompt", (_, body) => {
    expect(readCompletion("chat", bytes(body), { promptBlocks: 100 }).blocks).toBeUndefined();
  });

  it("gives the blocks of a body its raw reader gives up on by parsing it", () => {
    const parts = [{ role: "user", content: [{ type: "text", text: "hi ".repeat(50) }] }];
    expect(readCompletion("chat", bytes({ messages: parts }), { promptBlocks: 100 }).blocks).toEqual(blockHashes(promptOf("chat", { messages: parts })!));
  });
});
