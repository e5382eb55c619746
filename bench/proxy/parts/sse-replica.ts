// The proxy benches' minimal replica: it answers at once and does as little as it can, so that a
// proxy in front of it is what the figures show. A chat completion without `stream: true` gets a
// one-token answer; with it, a 64-token stream as vLLM sends it when asked for continuous usage
// (as the proxy asks): 68 events (role, 64 tokens, finish, usage, [DONE]), each written on its own,
// back to back. GET /v1/models lists the model, as a service's readiness probe reads it. POST PASS_THROUGH_PATH gets the same stream whatever its body: the endpoint proxy
// reads only completions, so that path measures its plain pass-through of the same bytes.
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { MODEL } from "./processes.js";
import { answerChunks } from "./stream-reader-cost.js";

export const STREAM_TOKENS = 64;
export const PASS_THROUGH_PATH = "/v1/bench/stream";
const STREAM = answerChunks(STREAM_TOKENS);
/** A streamed chat completion whose answer is that stream. */
export const STREAMED_64 = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Say hi" }], max_tokens: STREAM_TOKENS, stream: true });
/** The events of one streamed answer: CPU per chunk is CPU per answer over this. */
export const STREAM_CHUNKS = STREAM.length;

const ONE_TOKEN_ANSWER = JSON.stringify({
  id: "chatcmpl-5f0c3a9e2b7d4c1a8e6f",
  object: "chat.completion",
  created: 1764115200,
  model: MODEL,
  choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, logprobs: null, finish_reason: "length" }],
  usage: { prompt_tokens: 21, total_tokens: 22, completion_tokens: 1 },
});

const MODELS = JSON.stringify({ object: "list", data: [{ id: MODEL, object: "model", created: 1764115200, owned_by: "bench" }] });

/** Listens on a free loopback port; resolves with it. */
export async function startSseReplica(): Promise<number> {
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (chunk: Buffer) => parts.push(chunk));
    req.once("end", () => {
      const path = (req.url ?? "/").split("?", 1)[0];
      // What a service's readiness probe asks before it routes to a replica (bench:keys runs the real service).
      if (req.method === "GET" && (path === "/v1/models" || path === "/health")) {
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(MODELS) }).end(MODELS);
        return;
      }
      if (req.method !== "POST" || (path !== "/v1/chat/completions" && path !== PASS_THROUGH_PATH)) {
        res.writeHead(404, { "content-type": "application/json" }).end('{"error":"not found"}');
        return;
      }
      if (path === PASS_THROUGH_PATH || asksStream(Buffer.concat(parts))) return void stream(res);
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(ONE_TOKEN_ANSWER) }).end(ONE_TOKEN_ANSWER);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

function asksStream(body: Buffer): boolean {
  try {
    return (JSON.parse(body.toString("utf8")) as { stream?: unknown }).stream === true;
  } catch {
    return false;
  }
}

/** The stream's events one write each, yielding between them so that each leaves on its own. */
async function stream(res: ServerResponse): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  for (const chunk of STREAM) {
    if (res.destroyed) return;
    res.write(chunk);
    await new Promise((resolve) => setImmediate(resolve));
  }
  res.end();
}
