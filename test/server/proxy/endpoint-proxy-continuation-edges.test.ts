import { createServer, request, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import type { RouteTarget } from "../../../src/module.js";
import { CALLER_TOKEN, MODEL, callEndpoint, metricValue, startProxy, startReplica, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { chunksText, sseChunks, sseData } from "../../support/sse.js";
import {
  CONTENT,
  ENGINE_ERROR,
  REASONING,
  asTheReplicaGetsIt,
  cuttingReplica,
  expectedChunks,
  comparable,
  readStream,
  reasoningReplica,
  straightFrom,
  type CallerStream,
} from "../../support/streamed-answers.js";
import { waitFor } from "../../support/wait.js";

// Streamed answers through the endpoint proxy at the edges of continuation (SPEC.md section 2,
// "Answers that survive their replica"): replicas that send their headers long before their first
// event (as vLLM under uvicorn does while it queues and prefills), an engine's error event
// mid-answer, a reasoning model's thinking, a continuation refused with a 4xx, a slow caller, and
// the text so far counted in GPU_ENDPOINT_KEPT_BODY_BYTES. Real model servers and HTTP replicas.

const CHAT = { model: MODEL, messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 30 };
const TEXT = { model: MODEL, prompt: "Say hi. ", stream: true, max_tokens: 30 };
const TOOLS = { tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }] };
const STALL_MS = 300;
const FIRST_BYTE_MS = 5_000;

let proxy: ProxyUnderTest;
const opened: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  proxy = await startProxy({ firstByteMs: FIRST_BYTE_MS, continuation: { stallMs: STALL_MS, resumeMax: 2 } });
});

afterEach(async () => {
  for (const item of opened.splice(0)) await item.close();
  proxy.endpoints.clear();
  proxy.coming.clear();
});

afterAll(async () => {
  await proxy?.close();
});

async function replica(instanceId: string, tokenDelayMs = 15): Promise<{ server: ModelServer; target: RouteTarget }> {
  const started = await startReplica(instanceId, { tokenDelayMs });
  opened.push(started.server);
  return started;
}

async function opening<T extends { close(): Promise<void> }>(item: Promise<T>): Promise<T> {
  const ready = await item;
  opened.push(ready);
  return ready;
}

/** The caller's answer through endpoint `name` of `on`, its replicas `targets`. */
async function streamFrom(on: ProxyUnderTest, name: string, path: string, body: Record<string, unknown>, targets: RouteTarget[]): Promise<CallerStream> {
  on.endpoints.set(name, targets);
  const res = await callEndpoint(on, `/endpoints/${name}${path}`, body);
  expect(res.status).toBe(200);
  return readStream(res);
}

/** The error event that ends an answer not continued, and that nothing else ended it or came as an error before. */
function expectErrorEnd(caller: string, message: RegExp): void {
  const data = sseData(caller);
  expect(data).not.toContain("[DONE]");
  const error = JSON.parse(data.at(-1)!) as { error: { message: string; type: string; code: number } };
  expect(error.error).toEqual({ message: expect.stringMatching(message), type: "upstream_error", code: 502 });
  expect(data.slice(0, -1).some((d) => d.includes('"error"'))).toBe(false);
}

/** The caller read the answer never cut, chunk for chunk (usage as asked), one [DONE] last. */
function expectTheUncutAnswer(caller: string, uncut: string, usage: "none" | "final"): void {
  expect(sseChunks(caller).map(comparable)).toEqual(expectedChunks(uncut, usage));
  expect(sseData(caller).filter((d) => d === "[DONE]")).toHaveLength(1);
  expect(sseData(caller).at(-1)).toBe("[DONE]");
}

/** The Prometheus lines of `metric` for `endpoint`, label order aside. */
async function metricLines(on: ProxyUnderTest, metric: string, endpoint: string): Promise<string[]> {
  const text = await (await fetch(`${on.url}/metrics`, { headers: { authorization: `Bearer ${CALLER_TOKEN}` } })).text();
  return text.split("\n").filter((line) => line.startsWith(metric) && line.includes(`endpoint="${endpoint}"`));
}

/** Requests `on` holds for endpoint `name` now (a continuation waiting for a replica counts). */
const heldNow = (on: ProxyUnderTest, name: string) => on.load.entries(60_000).find((e) => e.endpointId === name)?.held ?? 0;

const count = (on: ProxyUnderTest, name: string, code: number) => metricValue(on, "gpu_endpoint_requests_total", `endpoint="${name}",code="${code}"`);

describe("a streamed answer whose first event comes long after its headers (vLLM queueing, prefilling, compiling a grammar)", () => {
  it(`is answered whole, not cut, when the first event comes 900 ms after the headers with GPU_ENDPOINT_STALL_MS ${STALL_MS}; the first-byte histogram shows the first event`, async () => {
    const model = await replica("gpu-model", 0);
    const slow = [await opening(cuttingReplica("gpu-a", model.server, (all) => all.length, "end", { firstEventMs: 900 })), await opening(cuttingReplica("gpu-b", model.server, (all) => all.length, "end", { firstEventMs: 900 }))];
    const bodies = [CHAT, { ...CHAT, stream_options: { include_usage: true } }, { ...CHAT, ...TOOLS }, TEXT];
    const paths = ["/v1/chat/completions", "/v1/chat/completions", "/v1/chat/completions", "/v1/completions"];
    proxy.endpoints.set("slowfirst", slow.map((r) => r.target));
    const started = performance.now();
    const answers = await Promise.all(bodies.map(async (body, i) => (await readStream(await callEndpoint(proxy, `/endpoints/slowfirst${paths[i]}`, body)).whole)));

    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    for (const [i, body] of bodies.entries()) {
      const uncut = await straightFrom(model.server, paths[i]!, asTheReplicaGetsIt(body));
      expectTheUncutAnswer(answers[i]!, uncut, i === 1 ? "final" : "none");
    }
    expect(slow.map((r) => r.requests.length).reduce((a, b) => a + b)).toBe(4);
    expect(await metricValue(proxy, "gpu_endpoint_streams_resumed_total", 'endpoint="slowfirst"')).toBe(0);
    expect(await count(proxy, "slowfirst", 200)).toBe(4);
    // Measured at the first event: none under 0.9 s (the headers came within milliseconds).
    const histogram = await metricLines(proxy, "gpu_endpoint_first_byte_seconds", "slowfirst");
    console.log(`first-byte histogram, first event 900 ms after the headers:\n${histogram.join("\n")}`);
    const value = (part: string) => Number(histogram.find((line) => line.includes(part))!.split(" ").pop());
    expect(value('le="0.5"')).toBe(0);
    expect(value("_count")).toBe(4);
    expect(value("_sum")).toBeGreaterThanOrEqual(4 * 0.9);
  });

  it(`is answered whole, not cut, when the replica sends its opening role chunk at once and its first token ${STALL_MS * 3} ms later`, async () => {
    // As the simulated model server does (and servers other than vLLM): the role with the headers, then the prefill's silence.
    const late = await startReplica("gpu-role-first", { tokenDelayMs: 5, firstTokenMs: STALL_MS * 3 });
    opened.push(late.server);
    proxy.endpoints.set("rolefirst", [late.target]);
    const started = performance.now();
    const answer = await (await readStream(await callEndpoint(proxy, "/endpoints/rolefirst/v1/chat/completions", CHAT))).whole;
    expect(performance.now() - started).toBeGreaterThanOrEqual(STALL_MS * 3);
    const uncut = await straightFrom(late.server, "/v1/chat/completions", asTheReplicaGetsIt(CHAT));
    expectTheUncutAnswer(answer, uncut, "none");
    expect(late.server.stats.completions).toBe(2);
    expect(await metricValue(proxy, "gpu_endpoint_streams_resumed_total", 'endpoint="rolefirst"')).toBe(0);
    expect(await count(proxy, "rolefirst", 200)).toBe(1);
  });

  it("is held to GPU_ENDPOINT_FIRST_BYTE_MS until its first event: continued elsewhere when it can be, else ended with the error event naming the limit", async () => {
    const patient = await opening(startProxy({ firstByteMs: 1_000, continuation: { stallMs: STALL_MS, resumeMax: 2 } }));
    const model = await replica("gpu-model", 0);
    // Headers, then nothing at all.
    const mute = await opening(cuttingReplica("gpu-mute", model.server, 0, "silence", { firstEventMs: 0 }));
    const live = await replica("gpu-live", 0);
    const uncut = await straightFrom(model.server, "/v1/chat/completions", asTheReplicaGetsIt(CHAT));
    let started = performance.now();
    // The caller's headers wait for the first event: the live replica is added once the answer waits for one.
    patient.coming.set("mute", { coming: true });
    const caller = streamFrom(patient, "mute", "/v1/chat/completions", CHAT, [mute.target]);
    await waitFor(() => heldNow(patient, "mute") === 1, "the answer waiting for a replica", 5000);
    expect(performance.now() - started).toBeGreaterThanOrEqual(950);
    patient.endpoints.set("mute", [mute.target, live.target]);
    const text = await (await caller).whole;
    expectTheUncutAnswer(text.replace(/gpu-live/g, "gpu-model"), uncut, "none");

    started = performance.now();
    const tools = await streamFrom(patient, "mute-tools", "/v1/chat/completions", { ...CHAT, ...TOOLS }, [mute.target]);
    expectErrorEnd(await tools.whole, /^replica gpu-mute failed mid-answer \(it sent no event within 1000 ms \(GPU_ENDPOINT_FIRST_BYTE_MS\)\), and this answer cannot be continued: it asks for tools$/);
    expect(performance.now() - started).toBeGreaterThanOrEqual(950);
  });

  it("reports the caller's own prompt_tokens when its first replica was cut before its first event", async () => {
    const model = await replica("gpu-model", 0);
    const reset = await opening(cuttingReplica("gpu-reset", model.server, 0, "reset", { firstEventMs: 50 }));
    const live = await replica("gpu-live", 0);
    const body = { ...CHAT, stream_options: { include_usage: true } };
    const uncut = sseChunks(await straightFrom(model.server, "/v1/chat/completions", asTheReplicaGetsIt(body)));
    proxy.coming.set("prompt", { coming: true });
    const caller = streamFrom(proxy, "prompt", "/v1/chat/completions", body, [reset.target]);
    await waitFor(() => heldNow(proxy, "prompt") === 1, "the answer waiting for a replica", 5000);
    proxy.endpoints.set("prompt", [reset.target, live.target]);
    const usage = sseChunks(await (await caller).whole).at(-1)!.usage!;

    expect(usage.prompt_tokens).toBeGreaterThan(0);
    expect(usage).toEqual(uncut.at(-1)!.usage);
    expect(live.server.stats.completions).toBe(1);
  });
});

describe("a replica's engine error event mid-answer", () => {
  it("is a cut: neither it nor its [DONE] reaches the caller, and the answer is continued on another replica", async () => {
    const model = await replica("gpu-model", 0);
    const failing = await opening(cuttingReplica("gpu-a", model.server, 8, "error"));
    const b = await replica("gpu-b", 0);
    const body = { ...CHAT, stream_options: { include_usage: true } };
    const uncut = await straightFrom(model.server, "/v1/chat/completions", asTheReplicaGetsIt(body));
    const caller = await streamFrom(proxy, "engine", "/v1/chat/completions", body, [failing.target]);
    proxy.endpoints.set("engine", [failing.target, b.target]);
    const text = await caller.whole;

    expect(text).not.toContain(ENGINE_ERROR);
    expectTheUncutAnswer(text, uncut, "final");
    expect(b.server.stats.completions).toBe(1);
    expect(await metricValue(proxy, "gpu_endpoint_streams_resumed_total", 'endpoint="engine"')).toBe(1);
    expect(await count(proxy, "engine", 200)).toBe(1);
  });

  it.each([
    ["no other replica is ready or coming", CHAT, "and no other replica is ready or coming"],
    ["it cannot be continued", { ...CHAT, ...TOOLS }, "and this answer cannot be continued: it asks for tools"],
  ])("ends the answer with the proxy's error event naming the replica's message, counted 502, when %s", async (_, body, rest) => {
    const model = await replica("gpu-model", 0);
    const failing = await opening(cuttingReplica("gpu-a", model.server, 8, "error"));
    const name = `engine-${Object.keys(body).length}`;
    const caller = await streamFrom(proxy, name, "/v1/chat/completions", body, [failing.target]);
    const text = await caller.whole;

    expectErrorEnd(text, new RegExp(`^replica gpu-a failed mid-answer \\(it sent an error event: "${ENGINE_ERROR.replace(/[().]/g, "\\$&")}"\\), ${rest}$`));
    expect(chunksText(sseChunks(text).filter((c) => "choices" in c)).length).toBeGreaterThan(0);
    expect(await count(proxy, name, 502)).toBe(1);
    expect(await count(proxy, name, 200)).toBe(0);
  });
});

describe("a reasoning model's answer (reasoning_content deltas, then content)", () => {
  const reasoningOf = (text: string) =>
    sseChunks(text)
      .map((c) => (c.choices?.[0]?.delta as { reasoning_content?: string } | undefined)?.reasoning_content ?? "")
      .join("");

  it("cut after its content started is continued from the content, the thinking read once, its tokens counted against max_tokens", async () => {
    // Role, six reasoning deltas, two content deltas, then cut.
    const first = await opening(reasoningReplica("gpu-a", 9));
    const second = await opening(reasoningReplica("gpu-b"));
    const body = { ...CHAT, model: "reasoner", max_tokens: 100 };
    const caller = await streamFrom(proxy, "reasoner", "/v1/chat/completions", body, [first.target]);
    proxy.endpoints.set("reasoner", [first.target, second.target]);
    const text = await caller.whole;

    expect(reasoningOf(text)).toBe(REASONING.join(""));
    expect(chunksText(sseChunks(text))).toBe(CONTENT.join(""));
    expect(sseData(text).at(-1)).toBe("[DONE]");
    const continuation = second.requests[0] as { messages: Array<{ role: string; content: string }>; max_tokens: number; continue_final_message: boolean };
    expect(continuation.messages.at(-1)).toEqual({ role: "assistant", content: CONTENT.slice(0, 2).join("") });
    expect(continuation.continue_final_message).toBe(true);
    expect(continuation.max_tokens).toBe(100 - REASONING.length - 2);
  });

  it("cut while it still thinks is not continued: the caller reads one thinking pass, then the error event", async () => {
    const first = await opening(reasoningReplica("gpu-a", 4));
    const second = await opening(reasoningReplica("gpu-b"));
    const caller = await streamFrom(proxy, "thinking", "/v1/chat/completions", { ...CHAT, model: "reasoner" }, [first.target]);
    proxy.endpoints.set("thinking", [first.target, second.target]);
    const text = await caller.whole;

    expectErrorEnd(text, /^replica gpu-a failed mid-answer \(its connection ended before the answer did\), while the model was still reasoning: a continuation would reason again$/);
    expect(reasoningOf(text)).toBe(REASONING.slice(0, 3).join(""));
    expect(second.requests).toHaveLength(0);
    expect(await metricValue(proxy, "gpu_endpoint_streams_cut_total", 'endpoint="thinking",reason="not_resumable"')).toBe(1);
  });
});

describe("a continuation answered 4xx", () => {
  it("ends the answer at once with the error event naming the status and the replica's message: no other replica tried, not held", async () => {
    let refusals = 0;
    const refusing: Server = createServer((req, res) => {
      refusals += 1;
      req.resume();
      req.once("end", () => {
        res.writeHead(400, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "error", message: "This model's maximum context length is 32768 tokens.", type: "BadRequestError", param: null, code: 400 }));
      });
    });
    await new Promise<void>((resolve) => refusing.listen(0, "127.0.0.1", resolve));
    opened.push({ close: () => new Promise<void>((resolve) => refusing.close(() => resolve())) });
    const refusingTarget = { instanceId: "gpu-refusing", url: `http://127.0.0.1:${(refusing.address() as AddressInfo).port}`, apiKey: null };
    const a = await replica("gpu-a");
    const other = await replica("gpu-other");
    proxy.coming.set("refused", { coming: true });
    const caller = await streamFrom(proxy, "refused", "/v1/chat/completions", CHAT, [a.target]);
    await waitFor(() => caller.events() >= 5, "5 events to the caller", 5000);
    proxy.endpoints.set("refused", [a.target, refusingTarget]);
    const cutAt = performance.now();
    await a.server.close();
    // Once the refusing replica is asked, another one is ready too: it must not be tried.
    await waitFor(() => refusals === 1, "the continuation sent", 5000);
    proxy.endpoints.set("refused", [refusingTarget, other.target]);
    const text = await caller.whole;

    expectErrorEnd(text, /^replica gpu-a failed mid-answer \(its connection ended before the answer did\), and replica gpu-refusing answered its continuation 400: This model's maximum context length is 32768 tokens\.$/);
    expect(performance.now() - cutAt).toBeLessThan(5_000);
    expect([refusals, other.server.stats.completions]).toEqual([1, 0]);
    expect(heldNow(proxy, "refused")).toBe(0);
    expect(await count(proxy, "refused", 502)).toBe(1);
  });
});

describe("a slow caller whose answer's [DONE] came in the read the proxy held back", () => {
  it("is finished and its replica's request let go at once, not counted in flight until the replica's idle timeout", async () => {
    const model = await replica("gpu-model", 0);
    const body = { ...CHAT, max_tokens: 20_000 };
    const whole = await straightFrom(model.server, "/v1/chat/completions", asTheReplicaGetsIt(body));
    // The whole answer in one write, on a connection the replica would keep for a minute.
    const eager: Server = createServer((req, res) => {
      req.resume();
      req.once("end", () => res.writeHead(200, { "content-type": "text/event-stream" }).end(whole));
    });
    eager.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => eager.listen(0, "127.0.0.1", resolve));
    opened.push({ close: () => new Promise<void>((resolve) => { eager.closeAllConnections(); eager.close(() => resolve()); }) });
    proxy.endpoints.set("eager", [{ instanceId: "gpu-eager", url: `http://127.0.0.1:${(eager.address() as AddressInfo).port}`, apiKey: null }]);
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(`${proxy.url}/endpoints/eager/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json" } }, resolve);
      req.once("error", reject);
      req.end(JSON.stringify(body));
    });
    // A slow reader: a piece, then a pause, to the end.
    let text = "";
    res.setEncoding("utf8");
    for await (const piece of res) {
      text += piece as string;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }

    expect(sseData(text).at(-1)).toBe("[DONE]");
    expect(chunksText(sseChunks(text))).toMatch(/ №20000$/);
    await waitFor(() => (proxy.load.entries(60_000).find((e) => e.endpointId === "eager")?.inFlight ?? 0) === 0, "the replica's request let go", 10_000);
    expect(await count(proxy, "eager", 200)).toBe(1);
  }, 30_000);
});

describe("the text so far, within GPU_ENDPOINT_KEPT_BODY_BYTES", () => {
  it("is counted in the kept bytes while the answer may be continued, and let go at its end; past the bound the answer is no longer continued", async () => {
    const small = await opening(startProxy({ keptBodyBytes: 4_096, continuation: { stallMs: 30_000, resumeMax: 2 } }));
    const [a, b] = [await replica("gpu-a", 5), await replica("gpu-b", 5)];
    const request = JSON.stringify(asTheReplicaGetsIt(CHAT)).length;
    const caller = await streamFrom(small, "kept", "/v1/chat/completions", { ...CHAT, max_tokens: 2_000 }, [a.target]);
    small.endpoints.set("kept", [a.target, b.target]);
    // The answer's text the caller has read, whole events only.
    const passed = () => chunksText(sseChunks(caller.text().slice(0, caller.text().lastIndexOf("\n\n") + 2))).length;
    await waitFor(() => passed() > 200, "200 characters to the caller", 5000);
    // The request and the text so far.
    expect(small.kept.bytes).toBeGreaterThan(request + 200);
    // Past 4 KiB of text: no room to keep it, no continuation.
    await waitFor(() => passed() > 4_096, "more text than the kept bytes hold", 20_000);
    expect(small.kept.bytes).toBeLessThanOrEqual(request + 10);
    await a.server.close();
    expectErrorEnd(await caller.whole, /^replica gpu-a failed mid-answer \(its connection ended before the answer did\), and this answer cannot be continued: this process keeps all the request bodies it may \(GPU_ENDPOINT_KEPT_BODY_BYTES\)$/);
    expect(b.server.stats.completions).toBe(0);
    await waitFor(() => small.kept.bytes === 0, "every kept byte let go", 5000);
  });
});
