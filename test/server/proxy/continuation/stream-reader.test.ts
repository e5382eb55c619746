import { describe, expect, it } from "vitest";
import { AnswerReader, type AnswerReaderOptions } from "../../../../src/server/proxy/continuation/stream-reader.js";
import { chunksText, sseChunks, sseData } from "../../../support/sse.js";

interface StreamSpec {
  id: string;
  created: number;
  path: "chat" | "completions";
  tokens: string[];
  finish?: string;
  /** Continuous usage on every chunk and a final usage chunk, as the proxy asks vLLM. */
  usage?: boolean;
  prompt?: number;
}

/** A replica's stream as vLLM writes it (its field order, usage last), optionally without its end. */
function replicaStream(spec: StreamSpec): string {
  const prompt = spec.prompt ?? 9;
  const usage = (n: number) => (spec.usage === false ? {} : { usage: { prompt_tokens: prompt, total_tokens: prompt + n, completion_tokens: n } });
  const object = spec.path === "chat" ? "chat.completion.chunk" : "text_completion";
  const head = { id: spec.id, object, created: spec.created, model: "m/x" };
  const choice = (text: string, finish: string | null, role = false) =>
    spec.path === "chat"
      ? { index: 0, delta: role ? { role: "assistant", content: "" } : finish ? {} : { content: text }, logprobs: null, finish_reason: finish }
      : { index: 0, text, logprobs: null, finish_reason: finish };
  const events: object[] = [];
  if (spec.path === "chat") events.push({ ...head, choices: [choice("", null, true)], ...usage(0) });
  spec.tokens.forEach((t, i) => events.push({ ...head, choices: [choice(t, null)], ...usage(i + 1) }));
  if (spec.finish) {
    events.push({ ...head, choices: [choice("", spec.finish)], ...usage(spec.tokens.length) });
    if (spec.usage !== false) events.push({ ...head, choices: [], ...usage(spec.tokens.length) });
  }
  return events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") + (spec.finish ? "data: [DONE]\n\n" : "");
}

const TOKENS = ["Hé", " said", ' "usage":', " \\n", " 日本", " ok\n", " ✓"];
const FIRST: StreamSpec = { id: "chatcmpl-1", created: 100, path: "chat", tokens: TOKENS, finish: "stop", usage: true, prompt: 9 };

/** Feeds `bytes` in pieces cut at `cuts`, returning what the reader passed on. */
function feed(reader: AnswerReader, bytes: Buffer, cuts: number[]): string {
  let out = "";
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    out += reader.push(bytes.subarray(at, cut));
    at = cut;
  }
  return out;
}

const reader = (options: Partial<AnswerReaderOptions> = {}) => new AnswerReader({ path: "chat", usage: "none", ...options });

describe("AnswerReader: reading a replica's stream chunk by chunk", () => {
  it("reads the same answer and passes the same events whatever the bytes' split, inside a UTF-8 character or a data: line included", () => {
    const bytes = Buffer.from(replicaStream(FIRST));
    const whole = reader();
    const expected = feed(whole, bytes, []);
    for (let cut = 1; cut < bytes.length; cut++) {
      const split = reader();
      expect(feed(split, bytes, [cut])).toBe(expected);
      expect(split.choices).toEqual(whole.choices);
    }
    const byByte = reader();
    expect(feed(byByte, bytes, Array.from({ length: bytes.length - 1 }, (_, i) => i + 1))).toBe(expected);
    expect(whole.choices).toEqual([{ text: TOKENS.join(""), reasoned: false, finishReason: "stop" }]);
    expect([whole.id, whole.created, whole.model, whole.done, whole.tokens, whole.promptTokens]).toEqual(['"chatcmpl-1"', "100", '"m/x"', true, 7, 9]);
  });

  it("passes only whole events: a half event at a cut is neither passed on nor counted", () => {
    const text = replicaStream({ ...FIRST, finish: undefined });
    const cutAt = text.lastIndexOf("data: ") + 30;
    const r = reader();
    const out = r.push(Buffer.from(text.slice(0, cutAt)));
    expect(chunksText(sseChunks(out))).toBe(TOKENS.slice(0, -1).join(""));
    expect([r.choices[0]!.text, r.tokens, r.done, r.finished]).toEqual([TOKENS.slice(0, -1).join(""), 6, false, false]);
  });

  it("strips usage the caller did not ask for, and drops the replica's usage chunk", () => {
    const out = reader({ usage: "none" }).push(Buffer.from(replicaStream(FIRST)));
    const chunks = sseChunks(out);
    expect(chunks.some((c) => "usage" in c)).toBe(false);
    expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
    expect(sseData(out).filter((d) => d === "[DONE]")).toHaveLength(1);
    expect(chunksText(chunks)).toBe(TOKENS.join(""));
  });

  it("with include_usage alone: no usage on the chunks, one final usage chunk for the whole answer before [DONE]", () => {
    const out = reader({ usage: "final" }).push(Buffer.from(replicaStream(FIRST)));
    const chunks = sseChunks(out);
    expect(chunks.slice(0, -1).some((c) => "usage" in c)).toBe(false);
    expect(chunks.at(-1)).toEqual({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 100, model: "m/x", choices: [], usage: { prompt_tokens: 9, total_tokens: 16, completion_tokens: 7 } });
    expect(sseData(out).at(-1)).toBe("[DONE]");
  });

  it("with continuous usage asked, passes the first replica's events byte for byte", () => {
    const text = replicaStream(FIRST);
    expect(reader({ usage: "continuous" }).push(Buffer.from(text))).toBe(text);
  });

  it("reads completions' text, and keeps usage removal valid JSON whichever member usage is", () => {
    const r = reader({ path: "completions" });
    const out = r.push(Buffer.from(replicaStream({ ...FIRST, path: "completions", finish: undefined }) + 'data: {"usage":{"completion_tokens":7},"choices":[{"index":0,"text":"!","finish_reason":null}]}\n\n'));
    expect(r.choices[0]!.text).toBe(`${TOKENS.join("")}!`);
    expect(sseData(out).at(-1)).toBe('{"choices":[{"index":0,"text":"!","finish_reason":null}]}');
  });
});

describe("AnswerReader: a continuation on another replica", () => {
  const SECOND: StreamSpec = { id: "chatcmpl-2", created: 200, path: "chat", tokens: [" and", " more"], finish: "length", usage: true, prompt: 30 };

  function cutAndContinue(usage: AnswerReaderOptions["usage"]) {
    const r = reader({ usage });
    const first = replicaStream({ ...FIRST, finish: undefined });
    const out1 = r.push(Buffer.from(first + first.slice(0, 40))); // and half an event, cut
    r.startReplica();
    const out2 = r.push(Buffer.from(replicaStream(SECOND)));
    return { r, out1, out2 };
  }

  it("passes the continuation with the first answer's id, created and model, its role chunk dropped", () => {
    const { r, out1, out2 } = cutAndContinue("none");
    const chunks = sseChunks(out2);
    expect(chunks.every((c) => c.id === "chatcmpl-1" && c.created === 100 && c.model === "m/x")).toBe(true);
    expect(chunks.some((c) => c.choices[0]?.delta?.role !== undefined)).toBe(false);
    expect(chunksText(sseChunks(out1 + out2))).toBe(`${TOKENS.join("")} and more`);
    expect(sseChunks(out1 + out2).filter((c) => c.choices[0]?.delta?.role)).toHaveLength(1);
    expect([r.choices[0], r.tokens, r.done]).toEqual([{ text: `${TOKENS.join("")} and more`, reasoned: false, finishReason: "length" }, 9, true]);
  });

  it("keeps a continuation's role chunk when the first replica failed before passing its own", () => {
    const r = reader();
    r.push(Buffer.from(": still loading\n\n"));
    r.startReplica();
    const chunks = sseChunks(r.push(Buffer.from(replicaStream(SECOND))));
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" });
    expect(chunks.every((c) => c.id === "chatcmpl-2")).toBe(true);
  });

  it("counts usage for the whole answer: the caller's prompt, every token passed on", () => {
    const final = sseChunks(cutAndContinue("final").out2).at(-1)!;
    expect(final).toMatchObject({ id: "chatcmpl-1", choices: [], usage: { prompt_tokens: 9, completion_tokens: 9, total_tokens: 18 } });
    const continuous = sseChunks(cutAndContinue("continuous").out2);
    expect(continuous.map((c) => c.usage!.completion_tokens)).toEqual([8, 9, 9, 9]);
    expect(continuous.every((c) => c.usage!.prompt_tokens === 9)).toBe(true);
  });
});

describe("AnswerReader: what else a stream may hold", () => {
  it("keeps a replica's error event as a cut: neither it nor anything after it (its [DONE]) is passed on", () => {
    const r = reader();
    const before = replicaStream({ ...FIRST, finish: undefined });
    const out = r.push(Buffer.from(`${before}data: {"error":{"object":"error","message":"engine died","type":"InternalServerError","code":500}}\n\ndata: [DONE]\n\n`));
    expect(out).toBe(reader().push(Buffer.from(before)));
    expect([r.error, r.done, r.finished]).toEqual(["engine died", false, false]);
    // The next replica's answer is read again.
    r.startReplica();
    expect(r.error).toBeUndefined();
    expect(r.push(Buffer.from('data: {"object":"error","message":"old vLLM","code":400}\n\n'))).toBe("");
    expect(r.error).toBe("old vLLM");
  });

  it("keeps whether reasoning was passed on apart from the text, and counts the text's UTF-8 bytes", () => {
    const r = reader({ usage: "final" });
    const chunk = (delta: object) => `data: {"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":${JSON.stringify(delta)},"finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\n`;
    r.push(Buffer.from(chunk({ role: "assistant", content: "" }) + chunk({ reasoning_content: "Let me think" }) + chunk({ reasoning: " more", content: null })));
    expect([r.choices[0], r.textBytes]).toEqual([{ text: "", reasoned: true, finishReason: null }, 0]);
    r.push(Buffer.from(chunk({ content: "日本", reasoning_content: null })));
    expect([r.choices[0]!.text, r.textBytes]).toEqual(["日本", 6]);
    r.dropText();
    r.push(Buffer.from(chunk({ content: "x" })));
    expect([r.choices[0]!.text, r.textBytes, r.keepText]).toEqual(["", 0, false]);
  });

  it("takes the caller's prompt_tokens from a continuation when the first replica passed nothing on", () => {
    const r = reader({ usage: "final" });
    r.push(Buffer.from(": no event yet\n\n"));
    r.startReplica();
    const out = r.push(Buffer.from(replicaStream({ ...FIRST, prompt: 11 })));
    expect(sseChunks(out).at(-1)!.usage).toEqual({ prompt_tokens: 11, total_tokens: 18, completion_tokens: 7 });
  });

  it("reads CRLF line ends, data over several lines, and passes comments on untouched", () => {
    const r = reader();
    const out = r.push(Buffer.from(': ping\r\n\r\ndata: {"id":"a","choices":[{"index":0,\r\ndata: "delta":{"content":"x"},"finish_reason":"stop"}],"usage":{"completion_tokens":1}}\r\n\r\ndata: [DONE]\r\n\r\n'));
    expect(out).toBe(': ping\r\n\r\ndata: {"id":"a","choices":[{"index":0, "delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n');
    expect([r.choices[0], r.tokens, r.done]).toEqual([{ text: "x", reasoned: false, finishReason: "stop" }, 1, true]);
  });

  it("counts events it cannot read and passes them on as they came", () => {
    const r = reader();
    expect(r.push(Buffer.from("data: {not json\n\n"))).toBe("data: {not json\n\n");
    expect(r.unreadable).toBe(1);
  });

  it("says when its tokens are not counted: a replica passed text without usage", () => {
    const r = reader();
    r.push(Buffer.from(replicaStream({ ...FIRST, usage: false, finish: undefined })));
    expect(r.tokensCounted).toBe(false);
    const counted = reader();
    counted.push(Buffer.from(replicaStream({ ...FIRST, finish: undefined })));
    expect(counted.tokensCounted).toBe(true);
  });

  it("is finished when every choice has its finish reason, and finish() ends it with usage and [DONE]", () => {
    const r = reader({ choices: 2, usage: "final" });
    r.push(Buffer.from('data: {"id":"c","created":1,"model":"m","choices":[{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'));
    expect(r.finished).toBe(false);
    r.push(Buffer.from('data: {"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'));
    expect(r.finished).toBe(true);
    expect(r.finish()).toBe('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}\n\ndata: [DONE]\n\n');
  });
});
