import { describe, expect, it } from "vitest";
import type { ModelServer } from "../../../../src/gpu/marketplace/simulated/model-server.js";
import { continuationRequest, firstRequest, resumability, type CompletionPath } from "../../../../src/server/proxy/continuation/continuation-request.js";
import { AnswerReader } from "../../../../src/server/proxy/continuation/stream-reader.js";
import { twoModelServers } from "../../../support/model-servers.js";
import { chunksText, sseChunks, sseData } from "../../../support/sse.js";

// The three units together, without the proxy: a simulated model server's stream cut mid-event
// after k events, continued on a second one with the continuation request, both read through the
// reader: the caller's answer equals the uncut one, character for character.

const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";
const servers = twoModelServers(MODEL);

const URL_PATH: Record<CompletionPath, string> = { chat: "/v1/chat/completions", completions: "/v1/completions" };

async function replicaBytes(server: ModelServer, path: CompletionPath, body: Record<string, unknown>): Promise<Buffer> {
  const res = await fetch(`http://127.0.0.1:${server.port}${URL_PATH[path]}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  expect(res.status).toBe(200);
  return Buffer.from(await res.arrayBuffer());
}

/** What the caller reads of an answer cut after `k` events (and 7 bytes of the next) and continued. */
async function cutAndContinued(path: CompletionPath, caller: Record<string, unknown>, k: number): Promise<string> {
  expect(resumability(path, caller)).toEqual({ resumable: true });
  const sent = firstRequest(caller);
  const reader = new AnswerReader({ path, usage: sent.usage, choices: sent.choices });
  const bytes = await replicaBytes(servers.first, path, sent.body);
  const eventEnds = [...bytes.toString("latin1").matchAll(/\n\n/g)].map((m) => m.index + 2);
  let out = reader.push(bytes.subarray(0, eventEnds[k - 1]! + 7));
  expect(reader.done).toBe(false);
  expect(reader.tokensCounted).toBe(true);
  const next = continuationRequest(path, sent.body, reader.choices[0]!.text, reader.tokens);
  if (next.finished) return out + reader.finish();
  reader.startReplica();
  out += reader.push(await replicaBytes(servers.second, path, next.body));
  expect(reader.done).toBe(true);
  return out;
}

/** What the caller reads of the same answer uncut. */
async function uncut(path: CompletionPath, caller: Record<string, unknown>): Promise<string> {
  const sent = firstRequest(caller);
  const reader = new AnswerReader({ path, usage: sent.usage, choices: sent.choices });
  return reader.push(await replicaBytes(servers.first, path, sent.body));
}

const CHAT = { model: MODEL, messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 20 };
const TEXT = { model: MODEL, prompt: "Say hi. ", stream: true, max_tokens: 20 };

describe("an answer cut on one model server and continued on another, read through the reader", () => {
  it.each([
    ["chat", CHAT, 5],
    ["chat", CHAT, 12],
    ["chat", { ...CHAT, max_tokens: 8 }, 6],
    ["chat", { ...CHAT, stream_options: { include_usage: true } }, 9],
    ["chat", { ...CHAT, stream_options: { include_usage: true, continuous_usage_stats: true } }, 15],
    ["completions", TEXT, 4],
    ["completions", { ...TEXT, stream_options: { include_usage: true } }, 13],
    ["completions", { ...TEXT, max_tokens: 30, stream_options: { include_usage: true, continuous_usage_stats: true } }, 19],
  ] as const)("%s %j cut after %i events: the caller reads the uncut answer", async (path, caller, k) => {
    const whole = await uncut(path, caller);
    const continued = await cutAndContinued(path, caller, k);
    const [a, b] = [sseChunks(whole), sseChunks(continued)];
    expect(chunksText(b)).toBe(chunksText(a));
    expect(chunksText(b)).toContain("instance m-17,");
    expect(sseData(continued).filter((d) => d === "[DONE]")).toHaveLength(1);
    // One answer: the first replica's id and created throughout (the uncut answer is another request).
    expect(new Set(b.map((c) => `${c.id} ${c.created} ${c.model}`)).size).toBe(1);
    expect(b.filter((c) => c.choices[0]?.delta?.role !== undefined)).toHaveLength(path === "chat" ? 1 : 0);
    expect(b.flatMap((c) => c.choices.map((choice) => choice.finish_reason)).filter((f) => f !== null)).toEqual(
      a.flatMap((c) => c.choices.map((choice) => choice.finish_reason)).filter((f) => f !== null),
    );
    // Usage as the caller asked: the same as the uncut answer's (its own prompt, every token).
    expect(b.map((c) => c.usage)).toEqual(a.map((c) => c.usage));
    if (!("stream_options" in caller)) expect(b.some((c) => "usage" in c)).toBe(false);
  });

  it("finishes an answer whose max_tokens is spent when its replica fails, rather than continuing it", async () => {
    const continued = await cutAndContinued("chat", { ...CHAT, max_tokens: 4, stream_options: { include_usage: true } }, 5);
    expect(chunksText(sseChunks(continued))).toBe("Hello from instance m-17,");
    expect(sseChunks(continued).at(-1)!.usage!.completion_tokens).toBe(4);
    expect(sseData(continued).at(-1)).toBe("[DONE]");
  });
});
