import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startModelServer, type ModelServer } from "../../../../src/gpu/marketplace/simulated/model-server.js";

const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";
/** 200 ms per thousand uncached tokens: a prompt of 2,000 tokens takes 400 ms to its first token uncached. */
const PREFILL_MS_PER_KTOKEN = 200;
const SYSTEM = "You are a careful assistant. ".repeat(280);

let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer({ model: MODEL, host: "127.0.0.1", instance: "m-1", tokenDelayMs: 0, prefillMsPerKtoken: PREFILL_MS_PER_KTOKEN, apiKey: "k" });
});
afterAll(() => server.close());

/** Milliseconds from the request to the first token's event of a streamed chat answer. */
async function timeToFirstToken(messages: Array<{ role: string; content: string }>): Promise<number> {
  const started = performance.now();
  return (await firstTokenAt(messages)) - started;
}

/** The moment (performance.now()) the first token's event of a streamed chat answer arrived. */
async function firstTokenAt(messages: Array<{ role: string; content: string }>): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${server.port}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer k" },
    body: JSON.stringify({ model: MODEL, messages, max_tokens: 2, stream: true }),
  });
  const reader = res.body!.getReader();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the stream ended before a token: ${text}`);
    text += new TextDecoder().decode(value);
    if (text.includes('"content":"Hello"')) break;
  }
  const at = performance.now();
  await reader.cancel();
  return at;
}

async function metrics(): Promise<Record<string, number>> {
  const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
  expect(res.status).toBe(200);
  const values: Record<string, number> = {};
  for (const line of (await res.text()).split("\n")) {
    const match = /^(vllm:\w+)\{engine="0",model_name="([^"]+)"\} (\S+)$/.exec(line);
    if (match) {
      expect(match[2]).toBe(MODEL);
      values[match[1]!] = Number(match[3]);
    }
  }
  return values;
}

describe("simulated model server: prefix caching as vLLM's", () => {
  it("answers a repeated long prompt's first token sooner than the first time, and a new turn of it as soon", async () => {
    const chat = [
      { role: "system", content: SYSTEM },
      { role: "user", content: "Summarise the rules." },
    ];
    const first = await timeToFirstToken(chat);
    const again = await timeToFirstToken(chat);
    const nextTurn = await timeToFirstToken([...chat, { role: "assistant", content: "Be careful." }, { role: "user", content: "Why?" }]);
    // ~2,100 prompt tokens: ~420 ms of prefill the first time, a block's worth after.
    expect(first).toBeGreaterThanOrEqual(380);
    expect(again).toBeLessThan(first / 4);
    expect(nextTurn).toBeLessThan(first / 4);
  });

  it("serves vLLM's prefix-cache counters on /metrics, without the key, in tokens", async () => {
    const before = await metrics();
    const prompt = [{ role: "user", content: "Another question entirely. ".repeat(40) }];
    await timeToFirstToken(prompt);
    await timeToFirstToken(prompt);
    const after = await metrics();
    const queried = after["vllm:prefix_cache_queries_total"]! - before["vllm:prefix_cache_queries_total"]!;
    const hits = after["vllm:prefix_cache_hits_total"]! - before["vllm:prefix_cache_hits_total"]!;
    expect(queried).toBe(2 * Math.ceil(`<|user|>\n${prompt[0]!.content}\n`.length / 4));
    expect(hits).toBe(Math.floor(`<|user|>\n${prompt[0]!.content}\n`.length / 64) * 16);
    expect(server.prefixCache).toEqual({ queries: after["vllm:prefix_cache_queries_total"], hits: after["vllm:prefix_cache_hits_total"] });
  });
});

describe("simulated model server: one prefill lane, prompts read one after another", () => {
  /** A prompt of its own (about 2,000 tokens), that no other prompt of this file begins like. */
  const uncached = (tag: string) => [{ role: "user", content: `${tag}: ${"a question never asked before. ".repeat(270)}` }];
  /** ~2,000 tokens at 200 ms a thousand. */
  const PREFILL_MS = 400;

  it("gives two prompts arriving together, uncached, their first tokens one prefill apart", async () => {
    const started = performance.now();
    const [a, b] = await Promise.all([firstTokenAt(uncached("one")), firstTokenAt(uncached("two"))]);
    const [sooner, later] = [Math.min(a, b) - started, Math.max(a, b) - started];
    expect(sooner).toBeGreaterThanOrEqual(PREFILL_MS * 0.95);
    expect(later - sooner).toBeGreaterThanOrEqual(PREFILL_MS * 0.9);
    expect(later).toBeLessThan(2 * PREFILL_MS + 300);
  });

  it("makes a cached prompt wait for the prefill queued before it, and no longer", async () => {
    const chat = [
      { role: "system", content: SYSTEM },
      { role: "user", content: "Which rule comes first?" },
    ];
    await timeToFirstToken(chat);
    expect(await timeToFirstToken(chat)).toBeLessThan(PREFILL_MS / 4);

    const started = performance.now();
    const long = firstTokenAt(uncached("three"));
    await new Promise((resolve) => setTimeout(resolve, PREFILL_MS / 4));
    const cachedStarted = performance.now();
    const cached = await firstTokenAt(chat);
    const longEnds = await long;
    // It arrived mid-prefill: it waits for the rest of it, then reads its own last block (0.3 ms).
    expect(cached - cachedStarted).toBeGreaterThanOrEqual(longEnds - started - PREFILL_MS / 4 - 60);
    expect(cached - longEnds).toBeLessThan(60);
  });
});
