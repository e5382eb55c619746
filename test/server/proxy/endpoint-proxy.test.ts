import http2 from "node:http2";
import { createServer, request, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import OpenAI, { APIError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import type { RouteTarget } from "../../../src/module.js";
import { CALLER_TOKEN, MODEL, callEndpoint, callReadingLate, metricValue, startProxy, startReplica, type ProxyUnderTest } from "../../support/endpoint-proxy.js";
import { createTokenFile } from "../../support/token-file.js";

// The endpoint proxy on its happy paths and refusals: real model servers, real sockets.

let proxy: ProxyUnderTest;
// A token that may read the GPU API but not call models, and one that may only call models.
const tokenFile = createTokenFile([
  { name: "reader", secret: "reader-secret", scopes: ["gpu:read"] },
  { name: "invoker", secret: "invoker-secret", scopes: ["endpoints:invoke"] },
]);
const replicas: Array<{ server: ModelServer; target: RouteTarget }> = [];
let recorder: Server;
const recorded: IncomingHttpHeaders[] = [];

beforeAll(async () => {
  proxy = await startProxy({ maxBodyBytes: 4096, tokensFile: tokenFile.path });
  replicas.push(await startReplica("gpu-a", { tokenDelayMs: 120 }), await startReplica("gpu-b", { tokenDelayMs: 120 }));
  replicas.push(await startReplica("gpu-keyed", { apiKey: "replica-key" }));
  replicas.push(await startReplica("gpu-fast", { tokenDelayMs: 0 }));
  proxy.endpoints.set("fast", [replicas[3]!.target]);
  proxy.endpoints.set("chat", [replicas[0]!.target, replicas[1]!.target]);
  proxy.endpoints.set("keyed", [replicas[2]!.target]);
  proxy.endpoints.set("empty", []);
  // A replica that only tells what it received, for the headers a model server does not echo.
  recorder = createServer((req, res) => {
    recorded.push(req.headers);
    req.resume();
    res.writeHead(200, { "content-type": "application/json", "keep-alive": "timeout=5", "x-private-hop": "1", connection: "x-private-hop" });
    res.end("{}");
  });
  await new Promise<void>((resolve) => recorder.listen(0, "127.0.0.1", resolve));
  const port = (recorder.address() as AddressInfo).port;
  proxy.endpoints.set("recorder", [{ instanceId: "gpu-rec", url: `http://127.0.0.1:${port}`, apiKey: null }]);
});

afterAll(async () => {
  await proxy?.close();
  tokenFile.remove();
  for (const replica of replicas) await replica.server.close();
  recorder?.closeAllConnections();
  await new Promise((resolve) => recorder?.close(resolve));
});

const chat = { model: MODEL, messages: [{ role: "user", content: "hi" }] };

/** A promise and the function that resolves it. */
function gate(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe("endpoint proxy", () => {
  it("answers a chat completion from a ready replica, naming it in x-endpoint-instance", async () => {
    const res = await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", { ...chat, max_tokens: 4 });
    expect(res.status).toBe(200);
    const instance = res.headers.get("x-endpoint-instance");
    expect(["gpu-a", "gpu-b"]).toContain(instance);
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]!.message.content).toBe(`Hello from instance ${instance},`);
  });

  it("passes GET /v1/models and the query string through", async () => {
    const res = await fetch(`${proxy.url}/endpoints/chat/v1/models?x=1`, { headers: { authorization: `Bearer ${CALLER_TOKEN}` } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: Array<{ id: string }> }).data[0]!.id).toBe(MODEL);
  });

  it("streams server-sent events chunk by chunk: the first arrives before the last is produced", async () => {
    const started = Date.now();
    const res = await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", { ...chat, stream: true, max_tokens: 5 });
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const first = await reader.read();
    const firstAt = Date.now() - started;
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const lastAt = Date.now() - started;
    // Five tokens 120 ms apart: the last leaves the replica about 480 ms after the first.
    expect(text).not.toMatch(/^data: \[DONE\]/);
    expect(first.value!.length).toBeLessThan(text.length);
    expect(lastAt - firstAt).toBeGreaterThanOrEqual(350);
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
  });

  it("passes back-to-back events on without waiting for the caller's ACKs (no Nagle delay)", async () => {
    // Nine events written at once by the replica: with Nagle's algorithm on the caller's socket,
    // each small write after the first waits for a delayed ACK, about 40 ms.
    const took: number[] = [];
    for (let i = 0; i < 9; i++) {
      const started = performance.now();
      await (await callEndpoint(proxy, "/endpoints/fast/v1/chat/completions", { ...chat, stream: true, max_tokens: 8 })).text();
      took.push(performance.now() - started);
    }
    expect(took.sort((a, b) => a - b)[4]).toBeLessThan(25);
  });

  it("streams to an HTTP/2 caller too, with no connection-specific header", async () => {
    const session = http2.connect(proxy.url);
    try {
      const stream = session.request({
        ":method": "POST",
        ":path": "/endpoints/chat/v1/completions",
        authorization: `Bearer ${CALLER_TOKEN}`,
        "content-type": "application/json",
      });
      stream.end(JSON.stringify({ prompt: "hi", stream: true, max_tokens: 2 }));
      const headers = await new Promise<http2.IncomingHttpHeaders>((resolve) => stream.once("response", resolve));
      let text = "";
      stream.on("data", (chunk: Buffer) => (text += chunk.toString()));
      await new Promise((resolve) => stream.once("end", resolve));
      expect(headers[":status"]).toBe(200);
      expect(headers["x-endpoint-instance"]).toMatch(/^gpu-[ab]$/);
      expect(headers.connection).toBeUndefined();
      expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    } finally {
      session.close();
    }
  });

  it("sends the replica's own key, never the caller's token", async () => {
    const res = await callEndpoint(proxy, "/endpoints/keyed/v1/chat/completions", { ...chat, max_tokens: 1 });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-keyed");

    recorded.length = 0;
    await (await callEndpoint(proxy, "/endpoints/recorder/v1/chat/completions", chat, { headers: { "x-request-id": "r-1" } })).text();
    expect(recorded[0]!.authorization).toBeUndefined();
    expect(recorded[0]!["x-request-id"]).toBe("r-1");
  });

  it("keeps hop-by-hop headers on their own hop, both ways", async () => {
    recorded.length = 0;
    const answer = await new Promise<IncomingHttpHeaders>((resolve, reject) => {
      const req = request(`${proxy.url}/endpoints/recorder/v1/models`, {
        headers: { authorization: `Bearer ${CALLER_TOKEN}`, connection: "keep-alive, x-caller-hop", "x-caller-hop": "1", "proxy-authorization": "Basic x", te: "trailers", expect: "100-continue" },
      });
      req.once("response", (res) => {
        res.resume();
        resolve(res.headers);
      });
      req.once("error", reject);
      req.end();
    });
    expect(recorded[0]!["x-caller-hop"]).toBeUndefined();
    expect(recorded[0]!["proxy-authorization"]).toBeUndefined();
    expect(recorded[0]!.te).toBeUndefined();
    expect(recorded[0]!.expect).toBeUndefined();
    expect(answer["x-private-hop"]).toBeUndefined();
    expect(answer["x-endpoint-instance"]).toBe("gpu-rec");
  });

  it("answers 401 without the service's token, before asking any replica", async () => {
    const before = replicas[0]!.server.stats.completions + replicas[1]!.server.stats.completions;
    const res = await fetch(`${proxy.url}/endpoints/chat/v1/chat/completions`, { method: "POST", body: JSON.stringify(chat) });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { detail: string }).detail).toMatch(/bearer token/);
    expect(replicas[0]!.server.stats.completions + replicas[1]!.server.stats.completions).toBe(before);
  });

  it("answers 403 naming the scope to a token without endpoints:invoke, and serves one with it", async () => {
    const before = replicas[0]!.server.stats.completions + replicas[1]!.server.stats.completions;
    const refused = await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", chat, { headers: { authorization: "Bearer reader-secret" } });
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { detail: string }).detail).toBe("token 'reader' may not call POST /endpoints/chat/v1/chat/completions: it needs scope endpoints:invoke");
    expect(replicas[0]!.server.stats.completions + replicas[1]!.server.stats.completions).toBe(before);
    const served = await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", { ...chat, max_tokens: 1 }, { headers: { authorization: "Bearer invoker-secret" } });
    expect(served.status).toBe(200);
    await served.text();
  });

  it("answers 404 for an unknown endpoint and a path outside /v1", async () => {
    for (const path of ["/endpoints/nope/v1/chat/completions", "/endpoints/chat/v2/x", "/endpoints/Bad_Name/v1/models"]) {
      const res = await callEndpoint(proxy, path, chat);
      expect(res.status, path).toBe(404);
      expect(((await res.json()) as { detail: string }).detail).toBeTruthy();
    }
  });

  it.each(["/endpoints/chat/v1/../admin", "/endpoints/chat/v1/%2e%2e/admin", "/endpoints/chat/v1/a%2fb"])("refuses %s with 400", async (path) => {
    // Sent as written: fetch would resolve the dot segments before they reach the service.
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port: new URL(proxy.url).port, path, headers: { authorization: `Bearer ${CALLER_TOKEN}` } });
      req.once("response", (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.once("error", reject);
      req.end();
    });
    expect(status).toBe(400);
  });

  it("answers every refusal in OpenAI's error shape, detail kept, and the OpenAI SDK raises it", async () => {
    const url = `${proxy.url}/endpoints`;
    const bad = (path: string) => fetch(`${url}${path}`, { method: "POST", headers: { authorization: `Bearer ${CALLER_TOKEN}` }, body: JSON.stringify(chat) });
    const refusals: Array<[number, Promise<Response>, string, string]> = [
      [401, fetch(`${url}/chat/v1/chat/completions`, { method: "POST", body: JSON.stringify(chat) }), "authentication_error", "invalid_api_key"],
      [403, callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", chat, { headers: { authorization: "Bearer reader-secret" } }), "permission_error", "permission_denied"],
      [404, bad("/nope/v1/chat/completions"), "not_found_error", "not_found"],
      [404, bad("/chat/v2/x"), "not_found_error", "no_route"],
      [413, callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", { ...chat, messages: [{ role: "user", content: "x".repeat(5000) }] }), "invalid_request_error", "request_too_large"],
      [503, bad("/empty/v1/chat/completions"), "server_error", "not_coming"],
    ];
    for (const [status, answer, type, code] of refusals) {
      const res = await answer;
      expect(res.status).toBe(status);
      const body = (await res.json()) as { error: { message: string; type: string; code: string }; detail: string };
      expect(body.error).toEqual({ message: body.detail, type, code });
      expect(body.detail.length).toBeGreaterThan(0);
    }
    const client = new OpenAI({ baseURL: `${url}/empty/v1`, apiKey: CALLER_TOKEN, maxRetries: 0 });
    const error = await client.chat.completions.create({ model: MODEL, messages: chat.messages as never }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(503);
    expect((error as APIError).code).toBe("not_coming");
    expect((error as APIError).message).toContain("endpoint 'empty' has no ready replica");
  });

  it("answers 503 with Retry-After when no replica is ready", async () => {
    const res = await callEndpoint(proxy, "/endpoints/empty/v1/chat/completions", chat);
    expect(res.status).toBe(503);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(((await res.json()) as { detail: string }).detail).toBe("endpoint 'empty' has no ready replica");
  });

  it("answers 413 for a body over MAX_BODY_BYTES, declared or chunked, and asks no replica", async () => {
    const before = replicas[0]!.server.stats.completions + replicas[1]!.server.stats.completions;
    const big = { ...chat, messages: [{ role: "user", content: "x".repeat(5000) }] };
    expect((await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", big)).status).toBe(413);

    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${proxy.url}/endpoints/chat/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json", "transfer-encoding": "chunked" },
      });
      req.once("response", (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.once("error", reject);
      for (let i = 0; i < 10; i++) req.write("x".repeat(1000));
      req.end();
    });
    expect(status).toBe(413);
    expect(replicas[0]!.server.stats.completions + replicas[1]!.server.stats.completions).toBe(before);
  });

  it("answers 413 to callers slow to read, their oversized bodies unread, with no reset taking the answer", async () => {
    // Declared over the bound (answered before any of it is read), and chunked (answered once it
    // grew past): each caller is still sending when the answer is written, and reads it 300 ms later.
    const answers = await Promise.all([
      ...Array.from({ length: 3 }, () => callReadingLate(proxy, "/endpoints/chat/v1/chat/completions", 800_000, 900_000)),
      ...Array.from({ length: 3 }, () => callReadingLate(proxy, "/endpoints/chat/v1/chat/completions", 800_000, undefined)),
    ]);
    for (const answer of answers) expect(answer).toMatch(/^HTTP\/1\.1 413 Payload Too Large\r\n[^]*connection: close[^]*request body exceeds 4096 bytes/i);
  });

  it("keeps the request body for a retry until the answer starts, then lets it go", async () => {
    // A replica that reads the whole body, starts its answer when told, and ends it when told.
    const steps = { bodyRead: gate(), answer: gate(), end: gate() };
    const holder = createServer((req, res) => {
      req.resume();
      req.once("end", async () => {
        steps.bodyRead.resolve();
        await steps.answer.promise;
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write("data: first\n\n");
        await steps.end.promise;
        res.end("data: [DONE]\n\n");
      });
    });
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    proxy.endpoints.set("held", [{ instanceId: "gpu-held", url: `http://127.0.0.1:${(holder.address() as AddressInfo).port}`, apiKey: null }]);
    try {
      const before = proxy.kept.bytes;
      const body = { ...chat, messages: [{ role: "user", content: "x".repeat(3000) }] };
      const answer = callEndpoint(proxy, "/endpoints/held/v1/chat/completions", body);
      await steps.bodyRead.promise;
      expect(proxy.kept.bytes - before).toBe(Buffer.byteLength(JSON.stringify(body)));

      steps.answer.resolve();
      const res = await answer;
      const reader = res.body!.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toBe("data: first\n\n");
      // The answer is under way and not over: no retry can come, so nothing of the body is kept.
      expect(proxy.kept.bytes - before).toBe(0);
      steps.end.resolve();
      while (!(await reader.read()).done);
    } finally {
      holder.closeAllConnections();
      await new Promise((resolve) => holder.close(resolve));
    }
  });

  it("counts requests by endpoint and code, and first-byte times", async () => {
    const ok = await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="chat",code="200"');
    const none = await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="empty",code="503"');
    const timed = await metricValue(proxy, "gpu_endpoint_first_byte_seconds_count", 'endpoint="chat"');
    await (await callEndpoint(proxy, "/endpoints/chat/v1/chat/completions", { ...chat, max_tokens: 1 })).text();
    await (await callEndpoint(proxy, "/endpoints/empty/v1/chat/completions", chat)).text();
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="chat",code="200"')).toBe(ok + 1);
    expect(await metricValue(proxy, "gpu_endpoint_requests_total", 'endpoint="empty",code="503"')).toBe(none + 1);
    expect(await metricValue(proxy, "gpu_endpoint_first_byte_seconds_count", 'endpoint="chat"')).toBe(timed + 1);
    expect(await metricValue(proxy, "http_requests_total", 'route="/endpoints/{name}/v1/*",method="POST",status="200"')).toBeGreaterThan(0);
  });
});
