import { describe, expect, it } from "vitest";
import { continuationRequest, firstRequest, resumability } from "../../../../src/server/proxy/continuation/continuation-request.js";
import { readCompletion } from "../../../../src/server/proxy/completion-body.js";

const ASK = [{ role: "user", content: "hi" }];
const chat = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ model: "m", messages: ASK, stream: true, ...extra });
const text = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ model: "m", prompt: "Say hi. ", stream: true, ...extra });

describe("resumability: a continuation could not be the same answer", () => {
  it.each([
    ["chat", chat({ stream: false }), "the answer is not streamed"],
    ["chat", { model: "m", messages: ASK }, "the answer is not streamed"],
    ["chat", chat({ n: 2 }), "it asks n = 2 choices"],
    ["completions", text({ best_of: 3 }), "it asks best_of = 3"],
    ["chat", chat({ tools: [{ type: "function", function: { name: "f" } }] }), "it asks for tools"],
    ["chat", chat({ functions: [{ name: "f" }] }), "it asks for functions"],
    ["chat", chat({ response_format: { type: "json_object" } }), 'it asks response_format "json_object"'],
    ["chat", chat({ guided_json: { type: "object" } }), "it asks guided decoding (guided_json)"],
    ["chat", chat({ guided_regex: "a+" }), "it asks guided decoding (guided_regex)"],
    ["completions", text({ guided_choice: ["a", "b"] }), "it asks guided decoding (guided_choice)"],
    ["completions", text({ guided_grammar: "root ::= x" }), "it asks guided decoding (guided_grammar)"],
    ["chat", chat({ structured_outputs: { regex: "a+" } }), "it asks guided decoding (structured_outputs)"],
    ["chat", chat({ logprobs: true }), "it asks logprobs"],
    ["chat", chat({ top_logprobs: 2 }), "it asks top_logprobs"],
    ["completions", text({ logprobs: 0 }), "it asks logprobs"],
    ["completions", text({ echo: true }), "it asks echo"],
    ["completions", text({ prompt: ["a", "b"] }), "its prompt is not one string"],
    ["completions", text({ prompt: [1, 2, 3] }), "its prompt is not one string"],
    ["chat", chat({ messages: "hi" }), "its messages are not a list"],
    ["chat", chat({ messages: [...ASK, { role: "assistant", content: [{ type: "text", text: "x" }] }], continue_final_message: true, add_generation_prompt: false }), "the final assistant message it continues is not one string"],
  ] as const)("%s %j: %s", (path, body, reason) => {
    expect(resumability(path, body)).toEqual({ resumable: false, reason });
  });

  it.each([
    ["chat", chat({ n: 1, best_of: 1, tools: [], logprobs: false, top_logprobs: 0, response_format: { type: "text" }, temperature: 0.7, stop: ["\n"] })],
    ["chat", chat({ tools: null, guided_json: null, n: null })],
    ["completions", text({ max_tokens: 30, echo: false, suffix: "!" })],
    ["chat", chat({ messages: [...ASK, { role: "assistant", content: "Sure: " }], continue_final_message: true, add_generation_prompt: false })],
  ] as const)("%s %j may be continued", (path, body) => {
    expect(resumability(path, body)).toEqual({ resumable: true });
  });
});

describe("firstRequest: the caller's request with usage on every chunk, and what the caller asked", () => {
  it.each([
    [undefined, "none"],
    [{ include_usage: false, continuous_usage_stats: true }, "none"],
    [{ include_usage: true }, "final"],
    [{ include_usage: true, continuous_usage_stats: true }, "continuous"],
  ] as const)("stream_options %j: the caller sees usage %s", (options, usage) => {
    const body = chat({ max_tokens: 8, ...(options ? { stream_options: options } : {}) });
    const first = firstRequest(body);
    expect(first).toEqual({ body: { ...body, stream_options: { include_usage: true, continuous_usage_stats: true } }, usage, choices: 1 });
    expect(body.stream_options).toEqual(options); // the caller's body untouched
  });
});

describe("continuationRequest: the text so far and the tokens that remain", () => {
  const first = (body: Record<string, unknown>) => firstRequest(body).body;

  it.each([
    [
      "chat: the text so far as a final assistant message, continued",
      "chat",
      chat({ max_tokens: 24 }),
      { messages: [...ASK, { role: "assistant", content: "Hello from" }], continue_final_message: true, add_generation_prompt: false, max_tokens: 22 },
    ],
    [
      "chat: appended to the caller's own final assistant message when it asked continue_final_message",
      "chat",
      chat({ messages: [...ASK, { role: "assistant", content: "Sure: ", name: "a" }], continue_final_message: true, add_generation_prompt: false, max_completion_tokens: 10 }),
      { messages: [...ASK, { role: "assistant", content: "Sure: Hello from", name: "a" }], continue_final_message: true, add_generation_prompt: false, max_completion_tokens: 8 },
    ],
    [
      "chat: a final assistant message without continue_final_message is the caller's context, and the text is a new one",
      "chat",
      chat({ messages: [...ASK, { role: "assistant", content: "Earlier." }, { role: "user", content: "again" }, { role: "assistant", content: "Old" }] }),
      { messages: [...ASK, { role: "assistant", content: "Earlier." }, { role: "user", content: "again" }, { role: "assistant", content: "Old" }, { role: "assistant", content: "Hello from" }], continue_final_message: true, add_generation_prompt: false },
    ],
    ["completions: the prompt followed by the text so far", "completions", text({ max_tokens: 16, min_tokens: 5 }), { prompt: "Say hi. Hello from", max_tokens: 14, min_tokens: 3 }],
    ["completions: min_tokens met already is 0", "completions", text({ min_tokens: 1 }), { prompt: "Say hi. Hello from", min_tokens: 0 }],
  ] as const)("%s", (_, path, body, changed) => {
    const sent = first(body);
    expect(continuationRequest(path, sent, "Hello from", 2)).toEqual({ finished: false, body: { ...sent, ...changed } });
    expect(sent).toEqual(first(body)); // the first request untouched
  });

  it("is the first request again, with what remains, when nothing was passed on yet", () => {
    const sent = first(chat({ max_tokens: 5 }));
    expect(continuationRequest("chat", sent, "", 0)).toEqual({ finished: false, body: sent });
  });

  it.each([
    ["max_tokens", { max_tokens: 4 }],
    ["max_completion_tokens", { max_completion_tokens: 4 }],
    ["either", { max_tokens: 10, max_completion_tokens: 4 }],
  ])("is finished when no token of %s remains", (_, limits) => {
    expect(continuationRequest("chat", first(chat(limits)), "a b c d", 4)).toEqual({ finished: true });
    expect(continuationRequest("completions", first(text(limits)), "a b c d", 5)).toEqual({ finished: true });
  });
});

describe("readCompletion: which completions are read as streams", () => {
  const plan = (body: unknown) => readCompletion("chat", Buffer.from(typeof body === "string" ? body : JSON.stringify(body))).plan;
  it("plans a streamed chat completion, with usage asked on every chunk", () => {
    expect(plan(chat())?.first.body).toMatchObject({ stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } });
    expect(plan('{ "model": "m", "messages": [], "stream" : true }')).toBeDefined();
  });
  it.each([
    ["no stream key at all (not parsed)", { model: "m", messages: ASK, max_tokens: 1 }],
    ["stream false", chat({ stream: false })],
    ['"stream" only inside a message', { model: "m", messages: [{ role: "user", content: '"stream": true' }] }],
    ["not JSON", '"stream": true'],
  ])("passes on untouched: %s", (_what, body) => {
    expect(plan(body)).toBeUndefined();
  });
});
