import { createServer, request, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import type { RouteTarget } from "../../../src/module.js";
import { CALLER_TOKEN, MODEL, callEndpoint, metricValue, startProxy, startReplica, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { chunksText, sseChunks, sseData } from "../../support/sse.js";
import { asTheReplicaGetsIt, comparable, cuttingReplica, expectedChunks, readStream, straightFrom, usageAsked, type CallerStream } from "../../support/streamed-answers.js";
import { waitFor } from "../../support/wait.js";

// Streamed answers through the endpoint proxy whose replica fails mid-answer (SPEC.md section 2,
// "Answers that survive their replica"): real simulated model servers closed (their connections
// reset) or a replica that goes silent, the answer continued on another replica; the caller's
// whole text is compared with the answer never cut, character for character.

const PATHS = { chat: "/v1/chat/completions", completions: "/v1/completions" } as const;
type Path = keyof typeof PATHS;
const CHAT = { model: MODEL, messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 40 };
const TEXT = { model: MODEL, prompt: "Say hi. ", stream: true, max_tokens: 40 };
const INCLUDE_USAGE = { include_usage: true };
const CONTINUOUS_USAGE = { include_usage: true, continuous_usage_stats: true };
const STALL_MS = 300;

let proxy: ProxyUnderTest;
const opened: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  proxy = await startProxy({ continuation: { stallMs: STALL_MS, resumeMax: 2 } });
});

afterEach(async () => {
  for (const item of opened.splice(0)) await item.close();
  proxy.endpoints.clear();
  proxy.coming.clear();
  proxy.routings.clear();
});

afterAll(async () => {
  await proxy?.close();
});

/** A simulated model server writing a token every `tokenDelayMs`, so that a cut lands mid-answer. */
async function replica(instanceId: string, tokenDelayMs = 15): Promise<{ server: ModelServer; target: RouteTarget }> {
  const started = await startReplica(instanceId, { tokenDelayMs });
  opened.push(started.server);
  return started;
}

/**
 * The caller's answer through `on`'s endpoint `name`, sent to `first` alone; `others` become ready
 * once it has started (so the first request surely went to `first`).
 */
async function streamThrough(on: ProxyUnderTest, name: string, path: Path, body: Record<string, unknown>, first: RouteTarget, others: RouteTarget[]): Promise<CallerStream> {
  on.endpoints.set(name, [first]);
  const res = await callEndpoint(on, `/endpoints/${name}${PATHS[path]}`, body);
  expect(res.status).toBe(200);
  expect(res.headers.get("x-endpoint-instance")).toBe(first.instanceId);
  const caller = readStream(res);
  on.endpoints.set(name, [first, ...others]);
  return caller;
}

/**
 * The caller read the answer never cut (`uncut`: the first replica's answer to the request as it
 * gets it): the same chunks in the same order (text, finish reason, usage as asked: the caller's
 * prompt_tokens, the whole answer's completion_tokens), one id, one role chunk, one `[DONE]`, last.
 */
function expectTheUncutAnswer(caller: string, uncut: string, path: Path, body: Record<string, unknown>): void {
  const chunks = sseChunks(caller);
  expect(chunks.map(comparable)).toEqual(expectedChunks(uncut, usageAsked(body)));
  expect(new Set(chunks.map((c) => `${c.id} ${c.created} ${c.model}`)).size).toBe(1);
  expect(chunks.filter((c) => c.choices[0]?.delta?.role !== undefined)).toHaveLength(path === "chat" ? 1 : 0);
  expect(sseData(caller).filter((d) => d === "[DONE]")).toHaveLength(1);
  expect(sseData(caller).at(-1)).toBe("[DONE]");
}

/** The error event that ends an answer not continued, and that nothing else ended it. */
function expectErrorEnd(caller: string, message: RegExp): void {
  const data = sseData(caller);
  expect(data).not.toContain("[DONE]");
  const error = JSON.parse(data.at(-1)!) as { error: { message: string; type: string; code: number } };
  expect(Object.keys(error)).toEqual(["error"]);
  expect(error.error).toEqual({ message: expect.stringMatching(message), type: "upstream_error", code: 502 });
  expect(data.slice(0, -1).some((d) => d.includes('"error"'))).toBe(false);
}

/** Requests the proxy holds for endpoint `name` now (a continuation waiting for a replica counts). */
const heldNow = (name: string) => proxy.load.entries(60_000).find((e) => e.endpointId === name)?.held ?? 0;

const RESET = "its connection ended before the answer did";

describe("a streamed answer whose replica's connection is reset mid-answer", () => {
  it.each([
    ["chat", CHAT],
    ["chat", { ...CHAT, stream_options: INCLUDE_USAGE }],
    ["chat", { ...CHAT, stream_options: CONTINUOUS_USAGE }],
    ["completions", TEXT],
    ["completions", { ...TEXT, stream_options: INCLUDE_USAGE }],
    ["completions", { ...TEXT, stream_options: CONTINUOUS_USAGE }],
  ] as Array<[Path, Record<string, unknown>]>)("%s %j is continued on another replica: the caller reads the uncut answer", async (path, body) => {
    const name = `reset-${path}-${usageAsked(body)}`;
    const [a, b] = [await replica("gpu-a"), await replica("gpu-b")];
    const uncut = await straightFrom(a.server, PATHS[path], asTheReplicaGetsIt(body));
    const asked = await straightFrom(a.server, PATHS[path], body);
    const caller = await streamThrough(proxy, name, path, body, a.target, [b.target]);
    await waitFor(() => caller.events() >= 8, "8 events to the caller", 5000);
    await a.server.close();
    const text = await caller.whole;

    expectTheUncutAnswer(text, uncut, path, body);
    // The same text as a request straight to the model server, character for character.
    expect(chunksText(sseChunks(text))).toBe(chunksText(sseChunks(asked)));
    expect(chunksText(sseChunks(text))).toMatch(/^Hello from instance gpu-a, .* №40$/);
    expect([a.server.stats.abandoned, b.server.stats.completions]).toEqual([1, 1]);
    expect(await metricValue(proxy, "gpu_endpoint_streams_resumed_total", `endpoint="${name}"`)).toBe(1);
    expect(await metricValue(proxy, "gpu_endpoint_resume_seconds_count", `endpoint="${name}"`)).toBe(1);
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", `endpoint="${name}",code="200"`)).toBe(1);
    // Its usage counts once, as the caller received it: the caller's prompt, 40 tokens in all.
    const usage = (kind: string) => metricValue(proxy, "gpu_endpoint_key_tokens_total", `endpoint="${name}",key="AUTH_TOKENS#1",kind="${kind}"`);
    const uncutUsage = sseChunks(uncut).at(-1)!.usage!;
    expect([await usage("prompt"), await usage("completion")]).toEqual([uncutUsage.prompt_tokens, 40]);
  });
});

describe("a streamed answer continued on an endpoint routed by prefix", () => {
  it("teaches the index that the replica it was continued on holds its prompt: the conversation's next turn is a hit there", async () => {
    const name = "prefix-continued";
    proxy.routings.set(name, "prefix");
    const [a, b, c] = [await replica("gpu-a"), await replica("gpu-b"), await replica("gpu-c")];
    const messages = [{ role: "system", content: "You answer questions about ships. ".repeat(20) }, { role: "user", content: "hi" }];
    const routed = (outcome: string) => metricValue(proxy, "gpu_endpoint_prefix_routed_total", `endpoint="${name}",outcome="${outcome}"`);
    const caller = await streamThrough(proxy, name, "chat", { ...CHAT, messages }, a.target, [b.target]);
    await waitFor(() => caller.events() >= 8, "8 events to the caller", 5000);
    await a.server.close();
    await caller.whole;
    expect([a.server.stats.abandoned, b.server.stats.completions]).toEqual([1, 1]);

    // Its next turn, with the replica that was cut gone from routing and another beside b: a hit on b.
    proxy.endpoints.set(name, [c.target, b.target]);
    const hits = await routed("hit");
    const res = await callEndpoint(proxy, `/endpoints/${name}/v1/chat/completions`, { ...CHAT, messages: [...messages, { role: "assistant", content: "Hello" }, { role: "user", content: "more" }] });
    await res.text();
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-b");
    expect(await routed("hit")).toBe(hits + 1);
    expect(await routed("miss")).toBe(1);
  });
});

describe("a streamed answer whose replica goes silent mid-answer", () => {
  it(`is continued on another replica once it sent nothing for GPU_ENDPOINT_STALL_MS (${STALL_MS} ms)`, async () => {
    const model = await replica("gpu-a", 0);
    const silent = await cuttingReplica("gpu-a", model.server, 6, "silence");
    opened.push(silent);
    const b = await replica("gpu-b");
    const body = { ...CHAT, stream_options: INCLUDE_USAGE };
    const uncut = await straightFrom(model.server, PATHS.chat, asTheReplicaGetsIt(body));
    const started = performance.now();
    const caller = await streamThrough(proxy, "silent", "chat", body, silent.target, [b.target]);
    const text = await caller.whole;

    expectTheUncutAnswer(text, uncut, "chat", body);
    expect(performance.now() - started).toBeGreaterThanOrEqual(STALL_MS);
    expect(b.server.stats.completions).toBe(1);
    expect(await metricValue(proxy, "gpu_endpoint_streams_resumed_total", 'endpoint="silent"')).toBe(1);
  });
});

describe("a streamed answer whose caller reads slowly", () => {
  it("is not taken for cut while the proxy holds its replica back for the caller (GPU_ENDPOINT_STALL_MS counts the replica's silence only)", async () => {
    const [a, b] = [await replica("gpu-a", 0), await replica("gpu-b", 0)];
    // Megabytes of events, more than the sockets between the proxy and the caller hold.
    const body = { ...CHAT, max_tokens: 30_000, stream_options: CONTINUOUS_USAGE };
    proxy.endpoints.set("slow", [a.target, b.target]);
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(`${proxy.url}/endpoints/slow/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json" } }, resolve);
      req.once("error", reject);
      req.end(JSON.stringify(body));
    });
    res.pause();
    await new Promise((resolve) => setTimeout(resolve, STALL_MS * 4));
    let text = "";
    res.setEncoding("utf8").on("data", (chunk: string) => (text += chunk)).resume();
    await new Promise((resolve) => res.once("end", resolve));

    expect(sseData(text).at(-1)).toBe("[DONE]");
    expect(chunksText(sseChunks(text))).toMatch(/ №30000$/);
    expect(a.server.stats.abandoned + b.server.stats.abandoned).toBe(0);
    expect(await metricValue(proxy, "gpu_endpoint_streams_resumed_total", 'endpoint="slow"')).toBe(0);
  }, 15_000);
});

describe("a streamed answer whose only replica is lost", () => {
  it("waits while a replica is coming, the caller's stream open with `: waiting for a replica` every 10 s, and is continued on the replica that comes", async () => {
    const [a, b] = [await replica("gpu-a"), await replica("gpu-b")];
    const body = { ...TEXT, stream_options: INCLUDE_USAGE };
    const uncut = await straightFrom(a.server, PATHS.completions, asTheReplicaGetsIt(body));
    proxy.coming.set("coming", { coming: true });
    const caller = await streamThrough(proxy, "coming", "completions", body, a.target, []);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    await a.server.close();
    const cutAt = performance.now();
    await waitFor(() => caller.text().includes(": waiting for a replica\n\n"), "a waiting comment", 15_000, 100);
    const waited = performance.now() - cutAt;
    expect(waited).toBeGreaterThanOrEqual(9_500);
    expect(caller.ended()).toBe(false);
    expect(heldNow("coming")).toBe(1);
    // The machine that was coming is ready (the lost one gone from the directory).
    proxy.endpoints.set("coming", [b.target]);
    const text = await caller.whole;

    expectTheUncutAnswer(text, uncut, "completions", body);
    expect(text.match(/: waiting for a replica\n\n/g)).toHaveLength(1);
    expect(b.server.stats.completions).toBe(1);
    expect(await metricValue(proxy, "gpu_endpoint_resume_seconds_sum", 'endpoint="coming"')).toBeGreaterThanOrEqual(waited / 1000);
    expect(heldNow("coming")).toBe(0);
  }, 30_000);

  it("ends with one error event and no [DONE] when no other replica is ready or coming", async () => {
    const a = await replica("gpu-a");
    const uncut = await straightFrom(a.server, PATHS.chat, CHAT);
    const caller = await streamThrough(proxy, "alone", "chat", CHAT, a.target, []);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    await a.server.close();
    const text = await caller.whole;

    expectErrorEnd(text, new RegExp(`^replica gpu-a failed mid-answer \\(${RESET}\\), and no other replica is ready or coming$`));
    // What came before the error is the answer's beginning, whole events.
    const passed = chunksText(sseChunks(text).filter((c) => "choices" in c));
    expect(passed.length).toBeGreaterThan(0);
    expect(chunksText(sseChunks(uncut)).startsWith(passed)).toBe(true);
    expect(await metricValue(proxy, "gpu_endpoint_streams_cut_total", 'endpoint="alone",reason="no_replica"')).toBe(1);
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="alone",code="502"')).toBe(1);
  });
});

describe("a streamed answer waiting for a replica", () => {
  it("ends with the error event once it waited GPU_ENDPOINT_HOLD_MS, counted from the cut, as a held request would be refused", async () => {
    const short = await startProxy({ hold: { ms: 500, max: 10 }, continuation: { stallMs: 30_000, resumeMax: 2 } });
    opened.push(short);
    const a = await replica("gpu-a");
    short.coming.set("short", { coming: true });
    const caller = await streamThrough(short, "short", "chat", CHAT, a.target, []);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    await a.server.close();
    const cutAt = performance.now();
    const text = await caller.whole;

    expect(performance.now() - cutAt).toBeGreaterThanOrEqual(450);
    expectErrorEnd(text, new RegExp(`^replica gpu-a failed mid-answer \\(${RESET}\\); no replica of endpoint 'short' became ready within 500 ms$`));
    expect(await metricValue(short, "gpu_endpoint_streams_cut_total", 'endpoint="short",reason="no_replica"')).toBe(1);
    expect(await metricValue(short, "gpu_endpoint_hold_seconds_count", 'endpoint="short"')).toBe(1);
  });

  it("waits in the endpoint's hold queue: GPU_ENDPOINT_HOLD_MAX counts it with the requests held there", async () => {
    const full = await startProxy({ hold: { ms: 5_000, max: 1 }, continuation: { stallMs: 30_000, resumeMax: 2 } });
    opened.push(full);
    const a = await replica("gpu-a");
    const caller = await streamThrough(full, "full", "chat", CHAT, a.target, []);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    // The replica is gone from the directory and another is coming: a request held meanwhile fills the queue.
    full.endpoints.set("full", []);
    full.coming.set("full", { coming: true });
    const heldRequest = callEndpoint(full, "/endpoints/full/v1/chat/completions", { ...CHAT, stream: false });
    await waitFor(() => full.load.entries(60_000).find((e) => e.endpointId === "full")?.held === 1, "a request held", 5000);
    await a.server.close();

    expectErrorEnd(await caller.whole, new RegExp(`^replica gpu-a failed mid-answer \\(${RESET}\\); endpoint 'full' has no ready replica, and 1 requests already wait for one here \\(GPU_ENDPOINT_HOLD_MAX\\)$`));
    expect(await metricValue(full, "gpu_endpoint_streams_cut_total", 'endpoint="full",reason="no_replica"')).toBe(1);
    // The request held first still waits, and is answered by the replica that comes.
    const b = await replica("gpu-b");
    full.endpoints.set("full", [b.target]);
    expect((await heldRequest).status).toBe(200);
  });

  it("ends with the error event when its endpoint is gone (deleted while the answer was on its way)", async () => {
    const [a, b] = [await replica("gpu-a"), await replica("gpu-b")];
    const caller = await streamThrough(proxy, "gone", "chat", CHAT, a.target, [b.target]);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    proxy.endpoints.delete("gone");
    await a.server.close();
    expectErrorEnd(await caller.whole, new RegExp(`^replica gpu-a failed mid-answer \\(${RESET}\\), and its endpoint no longer exists$`));
    expect(b.server.stats.completions).toBe(0);
  });

  it("stops waiting when its caller leaves: no longer held, counted 499, no replica asked", async () => {
    const [a, b] = [await replica("gpu-a"), await replica("gpu-b")];
    proxy.coming.set("leaving", { coming: true });
    const controller = new AbortController();
    proxy.endpoints.set("leaving", [a.target]);
    const res = await callEndpoint(proxy, "/endpoints/leaving/v1/chat/completions", CHAT, { signal: controller.signal });
    const caller = readStream(res);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    await a.server.close();
    await waitFor(() => heldNow("leaving") === 1, "the answer held", 5000);
    controller.abort();
    await waitFor(() => heldNow("leaving") === 0, "no longer held", 5000);
    proxy.endpoints.set("leaving", [b.target]);
    await waitFor(async () => (await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="leaving",code="499"')) === 1, "counted 499", 5000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(b.server.stats.completions).toBe(0);
  });
});

describe("a streamed answer that is not continued", () => {
  it.each([
    ["n: 2", { n: 2 }, "it asks n = 2 choices"],
    ["tools", { tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }] }, "it asks for tools"],
    ["response_format json_object", { response_format: { type: "json_object" } }, 'it asks response_format "json_object"'],
    ["logprobs", { logprobs: true }, "it asks logprobs"],
  ])("ends an answer that cannot be continued (%s) with one error event naming why", async (_, extra, why) => {
    const [a, b] = [await replica("gpu-a"), await replica("gpu-b")];
    const name = `not-${Object.keys(extra)[0]!.replace("_", "-")}`;
    const caller = await streamThrough(proxy, name, "chat", { ...CHAT, ...extra }, a.target, [b.target]);
    await waitFor(() => caller.events() >= 4, "4 events to the caller", 5000);
    await a.server.close();
    const text = await caller.whole;

    expectErrorEnd(text, new RegExp(`^replica gpu-a failed mid-answer \\(${RESET}\\), and this answer cannot be continued: ${why.replace(/[()]/g, "\\$&")}$`));
    expect(b.server.stats.completions).toBe(0);
    expect(await metricValue(proxy, "gpu_endpoint_streams_cut_total", `endpoint="${name}",reason="not_resumable"`)).toBe(1);
  });

  it("ends an answer cut a second time with GPU_ENDPOINT_RESUME_MAX 1 with an error event naming the limit", async () => {
    const limited = await startProxy({ continuation: { stallMs: 30_000, resumeMax: 1 } });
    opened.push(limited);
    const [a, b, c] = [await replica("gpu-a"), await replica("gpu-b"), await replica("gpu-c")];
    const caller = await streamThrough(limited, "limit", "chat", CHAT, a.target, [b.target]);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    await a.server.close();
    await waitFor(() => b.server.stats.completions === 1 && caller.events() >= 15, "the continuation's events", 5000);
    limited.endpoints.set("limit", [b.target, c.target]);
    await b.server.close();
    const text = await caller.whole;

    expectErrorEnd(text, new RegExp(`^replica gpu-b failed mid-answer \\(${RESET}\\), after 1 continuation\\(s\\) \\(GPU_ENDPOINT_RESUME_MAX\\)$`));
    expect(chunksText(sseChunks(text).filter((x) => "choices" in x))).toMatch(/^Hello from instance gpu-a, .* №\d+$/);
    expect(c.server.stats.completions).toBe(0);
    expect(await metricValue(limited, "gpu_endpoint_streams_resumed_total", 'endpoint="limit"')).toBe(1);
    expect(await metricValue(limited, "gpu_endpoint_streams_cut_total", 'endpoint="limit",reason="limit"')).toBe(1);
  });
});

describe("a streamed answer cut after every choice finished", () => {
  it("is finished by the proxy (its usage chunk and [DONE]), not continued", async () => {
    const model = await replica("gpu-a", 0);
    const body = { ...CHAT, max_tokens: 20, stream_options: INCLUDE_USAGE };
    const uncut = await straightFrom(model.server, PATHS.chat, asTheReplicaGetsIt(body));
    // Every event up to the finish_reason chunk's: not the usage chunk, nor [DONE].
    const finishing = await cuttingReplica("gpu-a", model.server, (all) => all.findIndex((e) => /"finish_reason":"\w+"/.test(e)) + 1, "reset");
    opened.push(finishing);
    const b = await replica("gpu-b");
    const caller = await streamThrough(proxy, "finished", "chat", body, finishing.target, [b.target]);
    const text = await caller.whole;

    expectTheUncutAnswer(text, uncut, "chat", body);
    expect(b.server.stats.completions).toBe(0);
    expect(await metricValue(proxy, "gpu_endpoint_streams_resumed_total", 'endpoint="finished"')).toBe(0);
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="finished",code="200"')).toBe(1);
  });
});

describe("an answer not streamed", () => {
  it("is passed on untouched, byte for byte, and its request too", async () => {
    const answer = '{"id":"chatcmpl-1",  "object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"h\\u00e9 ✓"}}]}\n';
    const got: Buffer[] = [];
    const server: Server = createServer((req, res) => {
      req.on("data", (chunk: Buffer) => got.push(chunk));
      req.once("end", () => res.writeHead(200, { "content-type": "application/json" }).end(answer));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    opened.push({ close: () => new Promise<void>((resolve) => server.close(() => resolve())) });
    proxy.endpoints.set("plain", [{ instanceId: "gpu-p", url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null }]);
    const body = { ...CHAT, stream: false };
    const res = await callEndpoint(proxy, "/endpoints/plain/v1/chat/completions", body);

    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(Buffer.from(answer))).toBe(true);
    expect(Buffer.concat(got).toString()).toBe(JSON.stringify(body));
  });
});
