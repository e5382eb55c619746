import { describe, expect, it } from "vitest";
import { readCompletion } from "../../../src/server/proxy/completion-body.js";
import { promptOf } from "../../../src/server/prefix-index/prompt-blocks.js";

// A completion's body read once for both things the proxy wants of it: whether it streams, and
// (for an endpoint routed by prefix) its prompt.

const messages = [
  { role: "system", content: "be brief" },
  { role: "user", content: "hi" },
];
const bytes = (body: unknown) => Buffer.from(typeof body === "string" ? body : JSON.stringify(body));

describe("a completion's body", () => {
  it("gives its stream plan and its prompt from one parse", () => {
    const read = readCompletion("chat", bytes({ messages, stream: true }), true);
    expect(read.plan?.first.body).toMatchObject({ messages, stream: true });
    expect(read.prompt).toBe(promptOf("chat", { messages }));
  });

  it("gives the prompt of one not streamed, when asked for it", () => {
    expect(readCompletion("completions", bytes({ prompt: "once upon" }), true)).toEqual({ plan: undefined, prompt: "once upon" });
    expect(readCompletion("completions", bytes({ prompt: "once upon" }), false)).toEqual({ plan: undefined, prompt: undefined });
  });

  it("gives max_tokens, else max_completion_tokens, when a key's admission asks for it", () => {
    expect(readCompletion("chat", bytes({ messages, max_tokens: 7, max_completion_tokens: 9 }), false, true).maxTokens).toBe(7);
    expect(readCompletion("chat", bytes({ messages, max_completion_tokens: 9 }), false, true).maxTokens).toBe(9);
    expect(readCompletion("chat", bytes({ messages, max_tokens: -1 }), false, true).maxTokens).toBeUndefined();
    expect(readCompletion("chat", bytes({ messages, max_tokens: 7 }), false).maxTokens).toBeUndefined();
  });

  it.each([
    ["not JSON", "{ messages"],
    ["a JSON list", [messages]],
    ["no messages", { model: "m" }],
  ])("routes as before when it is %s: no prompt", (_, body) => {
    expect(readCompletion("chat", bytes(body), true).prompt).toBeUndefined();
  });
});
