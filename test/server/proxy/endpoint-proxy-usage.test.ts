import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import { MODEL, callEndpoint, metricValue, startProxy, startReplica, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { sseChunks } from "../../support/sse.js";

// Each answer's usage, counted per caller and endpoint from the replica's own usage: a streamed
// answer whose caller asked no usage still counts its tokens, and the caller reads no usage chunk.

let proxy: ProxyUnderTest;
let server: ModelServer;
const CALLER = 'endpoint="chat",key="AUTH_TOKENS#1"';

beforeAll(async () => {
  proxy = await startProxy();
  const replica = await startReplica("gpu-a", { tokenDelayMs: 0 });
  server = replica.server;
  proxy.endpoints.set("chat", [replica.target]);
});

afterAll(async () => {
  await proxy?.close();
  await server?.close();
});

const tokens = (kind: string) => metricValue(proxy, "gpu_endpoint_key_tokens_total", `${CALLER},kind="${kind}"`);

describe("usage of every answer, per caller", () => {
  it("counts a whole answer's usage as the replica reports it", async () => {
    const [prompt, completion] = [await tokens("prompt"), await tokens("completion")];
    const res = await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi there" }], max_tokens: 5 });
    const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    expect(res.status).toBe(200);
    expect(await tokens("prompt")).toBe(prompt + body.usage.prompt_tokens);
    expect(await tokens("completion")).toBe(completion + body.usage.completion_tokens);
    expect(await metricValue(proxy, "gpu_endpoint_key_requests_total", `${CALLER},code="200"`)).toBeGreaterThanOrEqual(1);
  });

  it("counts a streamed answer whose caller asked no usage, and passes no usage chunk on", async () => {
    const [prompt, completion] = [await tokens("prompt"), await tokens("completion")];
    const res = await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "stream me" }], max_tokens: 6, stream: true });
    const chunks = sseChunks(await res.text());
    expect(chunks.some((chunk) => (chunk as { usage?: unknown }).usage !== undefined)).toBe(false);
    expect(await tokens("completion")).toBe(completion + 6);
    expect(await tokens("prompt")).toBeGreaterThan(prompt);
  });
});
