import { describe, expect, it } from "vitest";
import type { ModelServer } from "../../../../src/gpu/marketplace/simulated/model-server.js";
import { simulatedTokens } from "../../../../src/gpu/marketplace/simulated/simulated-answer.js";
import { twoModelServers } from "../../../support/model-servers.js";
import { chunksText, sseChunks, sseData } from "../../../support/sse.js";

const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";
const ASK = [{ role: "user", content: "hi" }];
const servers = twoModelServers(MODEL);

function post(server: ModelServer, path: string, body: unknown): Promise<Response> {
  return fetch(`http://127.0.0.1:${server.port}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** A streamed answer read whole: its text, finish reason and chunks. */
async function streamed(server: ModelServer, path: string, body: Record<string, unknown>) {
  const res = await post(server, path, { ...body, stream: true });
  expect(res.status).toBe(200);
  const raw = await res.text();
  const chunks = sseChunks(raw);
  const finish = chunks.flatMap((c) => c.choices.map((choice) => choice.finish_reason)).filter((f) => f !== null);
  return { raw, chunks, text: chunksText(chunks), finish };
}

const continueChat = (text: string, maxTokens: number) => ({
  messages: [...ASK, { role: "assistant", content: text }],
  continue_final_message: true,
  add_generation_prompt: false,
  max_tokens: maxTokens,
});

describe("simulated model server: answers long enough to be cut", () => {
  it("writes as many tokens as max_tokens asks beyond its sentence, numbered, and stops", async () => {
    const answer = await streamed(servers.first, "/v1/chat/completions", { messages: ASK, max_tokens: 24 });
    expect(answer.text).toBe(`Hello from instance m-17, serving ${MODEL}. This answer is simulated. ${Array.from({ length: 14 }, (_, i) => `№${i + 11}`).join(" ")}`);
    expect(simulatedTokens(answer.text)).toHaveLength(24);
    expect(answer.finish).toEqual(["stop"]);
  });

  it("keeps the sentence alone without max_tokens, and cuts it below its length", async () => {
    expect((await streamed(servers.first, "/v1/completions", { prompt: "hi" })).text).toBe(`Hello from instance m-17, serving ${MODEL}. This answer is simulated.`);
    const cut = await streamed(servers.first, "/v1/completions", { prompt: "hi", max_tokens: 3 });
    expect([cut.text, cut.finish]).toEqual(["Hello from instance", ["length"]]);
  });
});

describe("simulated model server: continuing an answer cut on another instance, as vLLM does", () => {
  it.each([4, 5, 10, 11, 17, 23])("chat: an answer cut after %i tokens and continued elsewhere equals the uncut one", async (k) => {
    const uncut = await streamed(servers.first, "/v1/chat/completions", { messages: ASK, max_tokens: 24 });
    const sofar = simulatedTokens(uncut.text).slice(0, k).join("");
    const rest = await streamed(servers.second, "/v1/chat/completions", continueChat(sofar, 24 - k));
    expect(sofar + rest.text).toBe(uncut.text);
    expect(rest.finish).toEqual(uncut.finish);
  });

  it("an answer cut before the instance's name (3 tokens) can only name the machine that continues it", async () => {
    const rest = await streamed(servers.second, "/v1/chat/completions", continueChat("Hello from instance", 21));
    expect(rest.text).toBe(` m-18, serving ${MODEL}. This answer is simulated. ${Array.from({ length: 14 }, (_, i) => `№${i + 11}`).join(" ")}`);
  });

  it("chat: a continuation of an answer cut by its max_tokens ends 'length' where the uncut one did", async () => {
    const uncut = await streamed(servers.first, "/v1/chat/completions", { messages: ASK, max_tokens: 7 });
    const sofar = simulatedTokens(uncut.text).slice(0, 5).join("");
    const rest = await streamed(servers.second, "/v1/chat/completions", continueChat(sofar, 2));
    expect([sofar + rest.text, rest.finish]).toEqual([uncut.text, ["length"]]);
  });

  it.each([4, 9, 12])("completions: a prompt that ends with %i tokens of an answer continues it", async (k) => {
    const uncut = await streamed(servers.first, "/v1/completions", { prompt: "Say hi. ", max_tokens: 16 });
    const sofar = simulatedTokens(uncut.text).slice(0, k).join("");
    const rest = await streamed(servers.second, "/v1/completions", { prompt: `Say hi. ${sofar}`, max_tokens: 16 - k });
    expect(sofar + rest.text).toBe(uncut.text);
  });

  it("chat: a final assistant message of the caller's own is continued with a whole answer, and that answer continued in turn", async () => {
    const own = { messages: [...ASK, { role: "assistant", content: "Sure: " }], continue_final_message: true, add_generation_prompt: false, max_tokens: 12 };
    const uncut = await streamed(servers.first, "/v1/chat/completions", own);
    expect(uncut.text.startsWith("Hello from instance m-17,")).toBe(true);
    const sofar = simulatedTokens(uncut.text).slice(0, 6).join("");
    const rest = await streamed(servers.second, "/v1/chat/completions", { ...own, messages: [...ASK, { role: "assistant", content: `Sure: ${sofar}` }], max_tokens: 6 });
    expect(sofar + rest.text).toBe(uncut.text);
  });

  it("chat: without continue_final_message a final assistant message starts a new answer of its own", async () => {
    const fresh = await streamed(servers.second, "/v1/chat/completions", { messages: [...ASK, { role: "assistant", content: "Hello from instance m-17," }], max_tokens: 4 });
    expect(fresh.text).toBe("Hello from instance m-18,");
  });

  it.each([
    [{ messages: ASK, continue_final_message: true }, /Cannot set both `continue_final_message` and `add_generation_prompt`/],
    [{ messages: ASK, stream_options: { include_usage: true } }, /Stream options can only be defined when `stream=True`/],
  ])("refuses %j with 400 as vLLM does", async (body, message) => {
    const res = await post(servers.first, "/v1/chat/completions", body);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(message);
  });
});

describe("simulated model server: usage in a stream", () => {
  it("sends one final usage chunk (choices: []) before [DONE] with include_usage, and none on the other chunks", async () => {
    const answer = await streamed(servers.first, "/v1/chat/completions", { messages: ASK, max_tokens: 12, stream_options: { include_usage: true } });
    expect(sseData(answer.raw).at(-1)).toBe("[DONE]");
    const last = answer.chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage!.completion_tokens).toBe(12);
    expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + 12);
    expect(answer.chunks.slice(0, -1).every((c) => !("usage" in c))).toBe(true);
  });

  it("carries usage on every chunk with continuous_usage_stats, counting the tokens written so far", async () => {
    const answer = await streamed(servers.first, "/v1/completions", { prompt: "hi", max_tokens: 5, stream_options: { include_usage: true, continuous_usage_stats: true } });
    expect(answer.chunks.map((c) => c.usage!.completion_tokens)).toEqual([1, 2, 3, 4, 5, 5, 5]);
    expect(answer.chunks.at(-1)!.choices).toEqual([]);
    const prompt = answer.chunks[0]!.usage!.prompt_tokens;
    expect(answer.chunks.every((c) => c.usage!.prompt_tokens === prompt && c.usage!.total_tokens === prompt + c.usage!.completion_tokens)).toBe(true);
  });

  it("counts a chat stream's role chunk as 0 tokens, and sends no usage without include_usage", async () => {
    const continuous = await streamed(servers.first, "/v1/chat/completions", { messages: ASK, max_tokens: 2, stream_options: { include_usage: true, continuous_usage_stats: true } });
    expect(continuous.chunks.map((c) => c.usage!.completion_tokens)).toEqual([0, 1, 2, 2, 2]);
    const none = await streamed(servers.first, "/v1/chat/completions", { messages: ASK, max_tokens: 2, stream_options: { continuous_usage_stats: true } });
    expect(none.chunks.some((c) => "usage" in c)).toBe(false);
  });
});
