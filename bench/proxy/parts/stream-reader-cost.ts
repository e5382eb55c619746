import { AnswerReader, type UsageAsked } from "../../../src/server/proxy/continuation/stream-reader.js";

// The continuation reader's CPU per streamed chunk: 64-token chat answers as vLLM streams them
// when the proxy asks for continuous usage (one event per network chunk), read and passed on as
// a caller that asked `usage` would get them. `bench:endpoint` can report it beside the proxy's
// CPU per request; `npm run bench:reader` (reader-cost.ts) prints it alone.

/** One answer's network chunks: a role chunk, `tokens` tokens, the finish, the usage chunk, [DONE] (the bench replica sends them too). */
export function answerChunks(tokens: number): Buffer[] {
  const head = { id: "chatcmpl-5f0c3a9e2b7d4c1a8e6f", object: "chat.completion.chunk", created: 1764115200, model: "Qwen/Qwen2.5-Coder-7B-Instruct" };
  const usage = (n: number) => ({ prompt_tokens: 21, total_tokens: 21 + n, completion_tokens: n });
  const events: object[] = [{ ...head, choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }], usage: usage(0) }];
  for (let i = 1; i <= tokens; i++) events.push({ ...head, choices: [{ index: 0, delta: { content: ` word${i}` }, logprobs: null, finish_reason: null }], usage: usage(i) });
  events.push({ ...head, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "length" }], usage: usage(tokens) });
  events.push({ ...head, choices: [], usage: usage(tokens) });
  return [...events.map((e) => Buffer.from(`data: ${JSON.stringify(e)}\n\n`)), Buffer.from("data: [DONE]\n\n")];
}

/** Nanoseconds of CPU per chunk reading `answers` 64-token answers (after a warm-up). */
export function streamReaderCost(answers = 20_000, usage: UsageAsked = "none"): number {
  const chunks = answerChunks(64);
  const read = (n: number) => {
    let passed = 0;
    for (let a = 0; a < n; a++) {
      const reader = new AnswerReader({ path: "chat", usage });
      for (const chunk of chunks) passed += reader.push(chunk).length;
    }
    return passed;
  };
  read(Math.ceil(answers / 10));
  const started = process.cpuUsage();
  read(answers);
  const used = process.cpuUsage(started);
  return ((used.user + used.system) * 1000) / (answers * chunks.length);
}

/** Nanoseconds of CPU per chunk for `read` over each chunk's JSON (the `data:` of the same answers), `answers` times. */
export function chunkReadCost(read: (json: string) => unknown, answers = 20_000): number {
  // The JSON as the reader gets it: a slice of the event's text.
  const jsons = answerChunks(64)
    .map((chunk) => chunk.toString("utf8").slice(6, -2))
    .filter((json) => json !== "[DONE]");
  const run = (n: number) => {
    let kept = 0;
    for (let a = 0; a < n; a++) for (const json of jsons) if (read(json) !== undefined) kept++;
    return kept;
  };
  run(Math.ceil(answers / 10));
  const started = process.cpuUsage();
  run(answers);
  const used = process.cpuUsage(started);
  return ((used.user + used.system) * 1000) / (answers * jsons.length);
}
