import OpenAI, { APIError } from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import { CALLER_TOKEN, MODEL, startProxy, startReplica, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { chunksText, sseChunks } from "../../support/sse.js";
import { asTheReplicaGetsIt, straightFrom } from "../../support/streamed-answers.js";

// The official OpenAI SDK reading a streamed answer through the endpoint proxy whose replica is
// cut mid-answer: it reads the whole answer, or, when the answer cannot be continued, raises the
// proxy's error event as an error rather than ending as if the answer were complete.

let proxy: ProxyUnderTest;
const servers: ModelServer[] = [];

beforeAll(async () => {
  proxy = await startProxy({ continuation: { stallMs: 30_000, resumeMax: 2 } });
});

afterEach(async () => {
  for (const server of servers.splice(0)) await server.close();
  proxy.endpoints.clear();
});

afterAll(async () => {
  await proxy?.close();
});

/** Two replicas: the endpoint's answers start on the first, the second made ready once one has. */
async function twoReplicas(name: string) {
  const a = await startReplica("gpu-a", { tokenDelayMs: 15 });
  const b = await startReplica("gpu-b", { tokenDelayMs: 15 });
  servers.push(a.server, b.server);
  proxy.endpoints.set(name, [a.target]);
  return { a, b, bothReady: () => proxy.endpoints.set(name, [a.target, b.target]) };
}

const clientOf = (name: string) => new OpenAI({ baseURL: `${proxy.url}/endpoints/${name}/v1`, apiKey: CALLER_TOKEN, maxRetries: 0 });
const messages = [{ role: "user" as const, content: "hi" }];

describe("the OpenAI SDK through a replica cut mid-answer", () => {
  it("streams the whole answer, continued on another replica", async () => {
    const { a, b, bothReady } = await twoReplicas("sdk");
    const body = { model: MODEL, messages, stream: true, max_tokens: 40, stream_options: { include_usage: true } };
    const uncut = sseChunks(await straightFrom(a.server, "/v1/chat/completions", asTheReplicaGetsIt(body)));
    const stream = await clientOf("sdk").chat.completions.create({ ...body, stream: true });
    bothReady();
    let [text, chunks] = ["", 0];
    const ids = new Set<string>();
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      if (++chunks === 8) await a.server.close();
      text += chunk.choices[0]?.delta?.content ?? "";
      ids.add(chunk.id);
      usage = chunk.usage ?? usage;
    }
    expect(text).toBe(chunksText(uncut));
    expect(text).toMatch(/^Hello from instance gpu-a, .* №40$/);
    expect(ids.size).toBe(1);
    expect(usage).toEqual(uncut.at(-1)!.usage);
    expect([a.server.stats.abandoned, b.server.stats.completions]).toEqual([1, 1]);
  });

  it("raises an error while iterating when the answer cannot be continued, with the proxy's reason", async () => {
    const { a, b, bothReady } = await twoReplicas("sdk-tools");
    const stream = await clientOf("sdk-tools").chat.completions.create({
      model: MODEL,
      messages,
      stream: true,
      max_tokens: 40,
      tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } }],
    });
    bothReady();
    let text = "";
    const read = (async () => {
      let chunks = 0;
      for await (const chunk of stream) {
        if (++chunks === 5) await a.server.close();
        text += chunk.choices[0]?.delta?.content ?? "";
      }
    })();
    const error = await read.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).message).toBe("replica gpu-a failed mid-answer (its connection ended before the answer did), and this answer cannot be continued: it asks for tools");
    expect((error as APIError).type).toBe("upstream_error");
    expect((error as APIError).code).toBe(502);
    expect(text).toMatch(/^Hello from/);
    expect(b.server.stats.completions).toBe(0);
  });
});
