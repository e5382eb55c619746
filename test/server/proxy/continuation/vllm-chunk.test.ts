import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { scanChunk, scanChunkFully } from "../../../../src/server/proxy/continuation/chunk-scan.js";
import { readVllmChunk } from "../../../../src/server/proxy/continuation/vllm-chunk.js";
import { parsedView, scannedView } from "./chunk-view.js";

// The chunk reader's fast path against JSON.parse on chunks as vLLM writes them (its chunk models
// through pydantic's model_dump_json(exclude_unset=True): members in the models' order, no spaces,
// unicode as is, only what the server set), and against the full scan on anything near them.

const HEAD_CHAT = '{"id":"chatcmpl-8d2f4c6a1b3e4f5a9c7d0e2b4a6c8e1f","object":"chat.completion.chunk","created":1764115200,"model":"Qwen/Qwen3-8B"';
const HEAD_COMPLETION = '{"id":"cmpl-3a1b5c7d9e2f4a6b8c0d1e3f5a7b9c2d","object":"text_completion","created":1764115201,"model":"meta-llama/Llama-3.1-8B"';
const USAGE = ',"usage":{"prompt_tokens":21,"total_tokens":24,"completion_tokens":3}';
const chat = (choices: string, usage = "") => `${HEAD_CHAT},"choices":[${choices}]${usage}}`;
const completion = (choices: string, usage = "") => `${HEAD_COMPLETION},"choices":[${choices}]${usage}}`;
const going = (delta: string, index = 0) => `{"index":${index},"delta":{${delta}},"logprobs":null,"finish_reason":null}`;

/** vLLM's own layouts: the fast path must read each, as JSON.parse does. */
const VLLM: Array<[string, string]> = [
  ["chat: the opening role chunk", chat(going('"role":"assistant","content":""'))],
  ["chat: the opening role chunk, continuous usage", chat(going('"role":"assistant","content":""'), ',"usage":{"prompt_tokens":21,"total_tokens":21,"completion_tokens":0}')],
  ["chat: a token", chat(going('"content":" Hello"'))],
  ["chat: a token, continuous usage", chat(going('"content":" Hello"'), USAGE)],
  ["chat: unicode as pydantic writes it (raw)", chat(going('"content":"日本語 é 🚀 \u2028"'), USAGE)],
  ["chat: escapes", chat(going('"content":"say \\"hi\\"\\n\\t\\\\ \\u0000 \\ud83d\\ude80 {\\"usage\\":1}]}"'), USAGE)],
  ["chat: a content of null", chat(going('"content":null'))],
  ["chat: the last token with its finish", chat('{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":"stop","stop_reason":null}', USAGE)],
  ["chat: an empty delta with its finish", chat('{"index":0,"delta":{},"logprobs":null,"finish_reason":"length","stop_reason":null}')],
  ["chat: a stop string", chat('{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":"</answer>"}')],
  ["chat: a stop token id", chat('{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":128009}')],
  ["chat: the second of n choices", chat(going('"content":"b"', 1), USAGE)],
  ["chat: two choices in one chunk", chat(`${going('"content":"a"', 0)},${going('"content":"b"', 1)}`)],
  ["chat: the final usage chunk", chat("", USAGE)],
  ["chat: usage null", chat(going('"content":"x"'), ',"usage":null')],
  ["chat: reasoning_content", chat(going('"reasoning_content":"Let me think: 2+2"'), USAGE)],
  ["chat: reasoning (the newer name)", chat(going('"reasoning":"so \\"4\\""'), USAGE)],
  ["chat: both reasoning names", chat(going('"reasoning_content":"hm","reasoning":"hm"'))],
  ["chat: reasoning ends, content starts", chat(going('"content":"4","reasoning_content":null'))],
  ["chat: an error-free object named like one", chat(going('"content":"error"'))],
  ["completions: a token", completion('{"index":0,"text":" word","logprobs":null,"finish_reason":null,"stop_reason":null}')],
  ["completions: a token, continuous usage", completion('{"index":0,"text":" wörd\\n","logprobs":null,"finish_reason":null,"stop_reason":null}', USAGE)],
  ["completions: the finish", completion('{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}', USAGE)],
  ["completions: the final usage chunk", completion("", USAGE)],
];

/** Near-vLLM layouts and others: the fast path must leave them to the full scan, which reads them as JSON.parse does. */
const OTHERS: Array<[string, string]> = [
  ["a tool-call delta", chat(going('"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]'))],
  ["a tool-call arguments delta", chat(going('"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\": \\"Paris\\"}"}}]'))],
  ["content beside tool calls", chat(going('"content":"x","tool_calls":[]'))],
  ["logprobs", chat('{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}]},"finish_reason":null}')],
  ["completions logprobs", completion('{"index":0,"text":"a","logprobs":{"text_offset":[0],"token_logprobs":[-0.5],"tokens":["a"],"top_logprobs":[null]},"finish_reason":null,"stop_reason":null}')],
  ["prompt_tokens_details", chat(going('"content":"x"'), ',"usage":{"prompt_tokens":21,"total_tokens":22,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":16}}')],
  ["usage in OpenAI's order", chat(going('"content":"x"'), ',"usage":{"prompt_tokens":21,"completion_tokens":1,"total_tokens":22}')],
  ["prompt_token_ids", `${HEAD_CHAT},"choices":[${going('"role":"assistant","content":""')}],"prompt_token_ids":[1,2,3]}`],
  ["token_ids in a choice", chat('{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null,"token_ids":[64]}')],
  ["OpenAI's layout", '{"id":"chatcmpl-B","object":"chat.completion.chunk","created":1,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}],"usage":null}'],
  ["spaces", '{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": null}]}'],
  ["members in another order", '{"object":"chat.completion.chunk","id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}'],
  ["a created that is not an integer", '{"id":"c","object":"chat.completion.chunk","created":1.5,"model":"m","choices":[]}'],
  ["a role of null", chat(going('"role":null,"content":"x"'))],
  ["a content that is not a string", chat(going('"content":5'))],
  ["a newline after the object", `${chat(going('"content":"x"'))}\n`],
  ["an object named error", '{"id":"c","object":"error","created":1,"model":"m","choices":[]}'],
];

describe("readVllmChunk, vLLM's layouts", () => {
  it.each(VLLM)("%s: read on the fast path as JSON.parse reads it", (_, chunk) => {
    const fast = readVllmChunk(chunk);
    expect(fast).toBeDefined();
    expect(scannedView(chunk, fast!)).toEqual(parsedView(chunk));
    expect(fast).toEqual(scanChunkFully(chunk));
    expect(scanChunk(chunk)).toEqual(fast);
  });
});

describe("readVllmChunk, other layouts", () => {
  it.each(OTHERS)("%s: left to the full scan, read as JSON.parse reads it", (_, chunk) => {
    expect(readVllmChunk(chunk)).toBeUndefined();
    const scan = scanChunk(chunk)!;
    expect(scan).toBeDefined();
    expect(scan).toEqual(scanChunkFully(chunk));
    if (scan.error) expect(JSON.parse(chunk)).toMatchObject({ object: "error" });
    else expect(scannedView(chunk, scan)).toEqual(parsedView(chunk));
  });

  it("takes a string kept with a bad escape for a chunk that is not JSON", () => {
    expect(scanChunk(chat(going('"content":"\\x"')))).toBeUndefined();
    expect(scanChunk('{"id":"c","choices":[{"index":0,"delta":{"content":"\\ud83"}}]}')).toBeUndefined();
  });

  it("leaves errors and what is not JSON to the full scan", () => {
    expect(readVllmChunk('{"error":{"message":"x","type":"BadRequestError","param":null,"code":400}}')).toBeUndefined();
    expect(scanChunk('{"error":{"message":"x","type":"BadRequestError","param":null,"code":400}}')!.error).toBe(true);
    for (const bad of ["", "{", '{"id":"', '{"id":"c"', chat(going('"content":"x')), chat(going('"content":"x"')).slice(0, -1), `${chat("")}}`]) {
      expect(readVllmChunk(bad)).toBeUndefined();
    }
  });
});

// Generated chunks: vLLM's layout with arbitrary text, ids, numbers and optional members; then the
// same chunks bent (a member added, spaces, members moved, cut short, a character changed).

const text = fc
  .array(fc.oneof(fc.string({ unit: "binary", maxLength: 4 }), fc.constantFrom('"', "\\", "\\\\", '\\"', "\n", "\t", "\u0000", "\u2028", "é", "日", "🚀", "}", "]", ",", ":", '{"usage":1}', "null")), { maxLength: 6 })
  .map((parts) => parts.join(""));
const count = fc.nat({ max: 2_000_000 });
const optional = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });

interface Generated {
  kind: "chat" | "completions";
  id: string;
  created: number;
  model: string;
  choices: Array<{
    index: number;
    role?: string;
    content?: string | null;
    reasoningContent?: string | null;
    reasoning?: string | null;
    deltaOrder: number;
    finishReason?: string | null;
    stopReason?: string | number | null;
  }>;
  usage?: { prompt: number; total: number; completion: number } | null;
}

const generated: fc.Arbitrary<Generated> = fc.record({
  kind: fc.constantFrom("chat" as const, "completions" as const),
  id: text,
  created: count,
  model: text,
  choices: fc.array(
    fc.record({
      index: fc.nat({ max: 8 }),
      role: optional(fc.constantFrom("assistant", "")),
      content: optional(fc.option(text, { nil: null })),
      reasoningContent: optional(fc.option(text, { nil: null })),
      reasoning: optional(fc.option(text, { nil: null })),
      deltaOrder: fc.nat({ max: 23 }),
      finishReason: optional(fc.option(fc.constantFrom("stop", "length", "abort", "tool_calls"), { nil: null })),
      stopReason: optional(fc.oneof(fc.constant(null), text, count)),
    }),
    { maxLength: 3 },
  ),
  usage: optional(fc.option(fc.record({ prompt: count, total: count, completion: count }), { nil: null })),
});

/** The chunk as vLLM's server would serialise it (JSON.stringify keeps the members' order). */
function written(g: Generated): string {
  const choices = g.choices.map((c) => {
    const delta: Record<string, unknown> = {};
    const members: Array<[string, unknown]> = [
      ["role", c.role],
      ["content", c.content],
      ["reasoning_content", c.reasoningContent],
      ["reasoning", c.reasoning],
    ];
    // vLLM's models keep one order; the fast path takes any order of a delta's members.
    for (const [key, value] of permutation(members, c.deltaOrder)) if (value !== undefined) delta[key] = value;
    const head = g.kind === "chat" ? { index: c.index, delta } : { index: c.index, text: typeof c.content === "string" ? c.content : "" };
    return { ...head, logprobs: null, finish_reason: c.finishReason, stop_reason: c.stopReason };
  });
  const object = g.kind === "chat" ? "chat.completion.chunk" : "text_completion";
  const usage = g.usage === null ? null : g.usage && { prompt_tokens: g.usage.prompt, total_tokens: g.usage.total, completion_tokens: g.usage.completion };
  return JSON.stringify({ id: g.id, object, created: g.created, model: g.model, choices, usage });
}

function permutation<T>(items: T[], n: number): T[] {
  const left = [...items];
  const out: T[] = [];
  for (let k = left.length; k > 0; k--) {
    out.push(left.splice(n % k, 1)[0]!);
    n = Math.floor(n / k);
  }
  return out;
}

/** Ways to bend a vLLM chunk out of vLLM's layout, each still valid JSON. */
const BENDS: Array<(chunk: string) => string> = [
  (c) => JSON.stringify(JSON.parse(c), null, 1),
  (c) => c.replace(/^\{"id":("(?:[^"\\]|\\.)*"),"object":("(?:[^"\\]|\\.)*")/, '{"object":$2,"id":$1'),
  (c) => `${c.slice(0, -1)},"prompt_token_ids":[1,2]}`,
  (c) => c.replace(/"logprobs":null/, '"logprobs":{"content":[]}'),
  // Before the delta's other fields, or alone in an empty delta (no comma then: still JSON).
  (c) => c.replace(/"delta":\{(\}?)/, (_, empty: string) => `"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]${empty === "" ? "," : "}"}`),
  (c) => c.replace(/"completion_tokens":(\d+)\}/, '"completion_tokens":$1,"prompt_tokens_details":{"cached_tokens":0}}'),
  (c) => c.replace(/^\{"id":/, '{"service_tier":"default","id":'),
  (c) => `${c} `,
];

/** The fast path, when it reads a chunk, reads it as the full scan does (a bad escape throwing in both). */
function agrees(chunk: string): void {
  const fast = outcome(() => readVllmChunk(chunk));
  if (fast.value !== undefined || fast.thrown) expect(fast).toEqual(outcome(() => scanChunkFully(chunk)));
}

function outcome<T>(read: () => T): { value?: T; thrown?: string } {
  try {
    return { value: read() };
  } catch (error) {
    return { thrown: (error as Error).name };
  }
}

describe("readVllmChunk, fuzzed", () => {
  it("reads every chunk in vLLM's layout, as JSON.parse and the full scan do", () => {
    fc.assert(
      fc.property(generated, (g) => {
        const chunk = written(g);
        const fast = readVllmChunk(chunk);
        expect(fast).toBeDefined();
        expect(fast).toEqual(scanChunkFully(chunk));
        expect(scannedView(chunk, fast!)).toEqual(parsedView(chunk));
      }),
      { numRuns: 1000 },
    );
  });

  it("leaves vLLM's chunks bent out of its layout to the full scan", () => {
    fc.assert(
      fc.property(generated, fc.nat({ max: BENDS.length - 1 }), (g, bend) => {
        const chunk = written(g);
        const bent = BENDS[bend]!(chunk);
        fc.pre(bent !== chunk);
        expect(readVllmChunk(bent)).toBeUndefined();
        expect(scannedView(bent, scanChunk(bent)!)).toEqual(parsedView(bent));
      }),
      { numRuns: 1000 },
    );
  });

  it("never accepts a chunk cut short", () => {
    fc.assert(
      fc.property(generated, fc.nat(), (g, at) => {
        const chunk = written(g);
        const cut = chunk.slice(0, at % chunk.length);
        expect(readVllmChunk(cut)).toBeUndefined();
        expect(scanChunk(cut)).toBeUndefined();
      }),
      { numRuns: 1000 },
    );
  });

  it("agrees with the full scan whatever one character is changed to", () => {
    const replacement = fc.constantFrom('"', "\\", "{", "}", "[", "]", ",", ":", " ", "0", "9", "-", "n", "a", "é");
    fc.assert(
      fc.property(generated, fc.nat(), replacement, (g, at, c) => {
        const chunk = written(g);
        const i = at % chunk.length;
        agrees(chunk.slice(0, i) + c + chunk.slice(i + 1));
      }),
      { numRuns: 3000 },
    );
  });
});
