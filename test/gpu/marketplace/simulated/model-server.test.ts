import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startModelServer, type ModelServer } from "../../../../src/gpu/marketplace/simulated/model-server.js";
import { sseData as events } from "../../../support/sse.js";
import { waitFor } from "../../../support/wait.js";

const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";
let server: ModelServer;
let keyed: ModelServer;
let base: string;

beforeAll(async () => {
  server = await startModelServer({ model: MODEL, host: "127.0.0.1", instance: "m-17", tokenDelayMs: 30 });
  keyed = await startModelServer({ model: MODEL, host: "127.0.0.1", instance: "m-18", apiKey: "replica-key" });
  base = `http://127.0.0.1:${server.port}`;
});

afterAll(async () => {
  await server?.close();
  await keyed?.close();
});

function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
}

describe("simulated model server completions", () => {
  it("answers a chat completion whole, naming its instance, cut at max_tokens", async () => {
    const res = await post("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; model: string; choices: Array<{ message: { role: string; content: string }; finish_reason: string }>; usage: { completion_tokens: number } };
    expect(body.object).toBe("chat.completion");
    expect(body.model).toBe(MODEL);
    expect(body.choices[0]!.message).toEqual({ role: "assistant", content: "Hello from instance m-17," });
    expect(body.choices[0]!.finish_reason).toBe("length");
    expect(body.usage.completion_tokens).toBe(4);
  });

  it("streams a chat completion as OpenAI's chunks, one token per event, ending with [DONE]", async () => {
    const res = await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], stream: true });
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const data = events(await res.text());
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { object: string; choices: Array<{ delta: { role?: string; content?: string }; finish_reason: string | null }> });
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("stop");
    const text = chunks.map((c) => c.choices[0]!.delta.content ?? "").join("");
    expect(text).toBe(`Hello from instance m-17, serving ${MODEL}. This answer is simulated.`);
  });

  it("answers /v1/completions whole and streamed", async () => {
    const whole = (await (await post("/v1/completions", { model: MODEL, prompt: "hi", max_tokens: 1 })).json()) as { object: string; choices: Array<{ text: string }> };
    expect(whole.object).toBe("text_completion");
    expect(whole.choices[0]!.text).toBe("Hello");
    const streamed = events(await (await post("/v1/completions", { prompt: "hi", max_tokens: 2, stream: true })).text());
    expect(streamed.at(-1)).toBe("[DONE]");
    expect(streamed.slice(0, -1).map((d) => (JSON.parse(d) as { choices: Array<{ text: string }> }).choices[0]!.text).join("")).toBe("Hello from");
  });

  it.each([
    ["{not json", 400, /not valid JSON/],
    [JSON.stringify({ max_tokens: 0 }), 400, /max_tokens/],
    [JSON.stringify({ stream: "yes" }), 400, /stream/],
    [JSON.stringify({ model: "other/model" }), 404, /does not exist/],
  ])("refuses %s with %i in OpenAI's error shape", async (body, status, message) => {
    const res = await post("/v1/chat/completions", body);
    expect(res.status).toBe(status);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(message);
  });

  it("waits firstTokenMs before the first token, as a model reads its prompt", async () => {
    const slow = await startModelServer({ model: MODEL, host: "127.0.0.1", firstTokenMs: 150 });
    try {
      const started = Date.now();
      const res = await fetch(`http://127.0.0.1:${slow.port}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "hi", max_tokens: 1 }) });
      expect(res.status).toBe(200);
      await res.text();
      expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    } finally {
      await slow.close();
    }
  });

  it("demands its key on /v1/* when it has one, and keeps /health open", async () => {
    const url = `http://127.0.0.1:${keyed.port}`;
    expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${url}/v1/models`, { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
    expect((await fetch(`${url}/v1/models`, { headers: { authorization: "Bearer replica-key" } })).status).toBe(200);
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });

  it("stops generating and counts the answer abandoned when the client leaves mid-stream", async () => {
    const before = { ...server.stats };
    await new Promise<void>((resolve, reject) => {
      const req = request(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" } }, (res) => {
        res.once("data", () => {
          req.destroy();
          resolve();
        });
      });
      req.once("error", (err) => (req.destroyed ? undefined : reject(err)));
      req.end(JSON.stringify({ stream: true, max_tokens: 1000 }));
    });
    await waitFor(() => server.stats.abandoned === before.abandoned + 1, "the abandoned answer", 2000);
    expect(server.stats.completions).toBe(before.completions + 1);
  });
});
