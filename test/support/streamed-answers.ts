import { createServer } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { ModelServer } from "../../src/gpu/marketplace/simulated/model-server.js";
import type { RouteTarget } from "../../src/module.js";
import { sseChunks, sseData, type StreamChunk } from "./sse.js";

// Streamed answers through the endpoint proxy in tests: the caller's side read as it comes, the
// answer never cut (straight from a simulated model server) to compare it with, and a replica that
// cuts its answer exactly where a test wants.

/** A caller's streamed answer, read as it arrives. */
export interface CallerStream {
  /** What has arrived so far. */
  text(): string;
  /** The `data:` events arrived so far. */
  events(): number;
  /** Everything, once the proxy ended the answer (rejects if the connection broke). */
  whole: Promise<string>;
  /** Whether the answer has ended. */
  ended(): boolean;
}

export function readStream(res: Response): CallerStream {
  let text = "";
  let ended = false;
  const decoder = new TextDecoder();
  const whole = (async () => {
    try {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) text += decoder.decode(chunk, { stream: true });
      return text + decoder.decode();
    } finally {
      ended = true;
    }
  })();
  whole.catch(() => undefined); // awaited by the test that cares
  return { text: () => text, events: () => sseData(text).length, whole, ended: () => ended };
}

/** The request a replica gets from the proxy for a streamed answer: usage asked on every chunk. */
export function asTheReplicaGetsIt(caller: Record<string, unknown>): Record<string, unknown> {
  const options = (caller.stream_options ?? {}) as Record<string, unknown>;
  return { ...caller, stream_options: { ...options, include_usage: true, continuous_usage_stats: true } };
}

/** The raw event stream a model server answers `body` with, never cut. */
export async function straightFrom(server: ModelServer, path: string, body: Record<string, unknown>): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${server.port}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`model server answered ${res.status}: ${await res.text()}`);
  return res.text();
}

type Usage = "none" | "final" | "continuous";

export function usageAsked(caller: Record<string, unknown>): Usage {
  const options = (caller.stream_options ?? {}) as Record<string, unknown>;
  return options.include_usage !== true ? "none" : options.continuous_usage_stats === true ? "continuous" : "final";
}

/**
 * The chunks a caller should read of the answer never cut: the replica's answer to the request as
 * it gets it (the simulated server counts prompt tokens from the body's length, so this is the
 * request that sets the caller's prompt_tokens), with the usage the caller did not ask for left
 * out. `id` and `created` are the answer's own, so they are left out of the comparison.
 */
export function expectedChunks(replicaAnswer: string, usage: Usage): Array<Omit<StreamChunk, "id" | "created">> {
  return sseChunks(replicaAnswer)
    .filter((c) => usage !== "none" || c.choices.length > 0)
    .map((c) => (usage === "continuous" || c.choices.length === 0 ? c : withoutUsage(c)))
    .map(comparable);
}

/** A chunk without what differs between two requests for the same answer (its id, its time). */
export function comparable(chunk: StreamChunk): Omit<StreamChunk, "id" | "created"> {
  const { id: _id, created: _created, ...rest } = chunk;
  return rest;
}

function withoutUsage(chunk: StreamChunk): StreamChunk {
  const { usage: _usage, ...rest } = chunk;
  return rest;
}

export type CutAfter =
  /** Sends nothing more, its connection left open (a hung model). */
  | "silence"
  /** Its connection destroyed. */
  | "reset"
  /** An engine error event then `data: [DONE]`, the answer ended, as vLLM does when its engine fails. */
  | "error"
  /** Nothing: the answer ends there (with every event, a whole answer). */
  | "end";

/** The message of the error event a replica cut with "error" sends. */
export const ENGINE_ERROR = "EngineCore encountered an issue. See stack trace (above) for the root cause.";

export interface CuttingOptions {
  /** Its headers at once and its first event this long after them, as vLLM (uvicorn) answers while it queues and prefills. */
  firstEventMs?: number;
}

export interface CuttingReplica {
  target: RouteTarget;
  /** The requests it got, as JSON. */
  requests: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

/**
 * A replica that answers with `model`'s own event stream (the same text, the same counts), passes
 * on its first `events` events one every few ms, then fails as `after` says. `events` may be a
 * function of the answer's events (e.g. all but `[DONE]`).
 */
export async function cuttingReplica(
  instanceId: string,
  model: ModelServer,
  events: number | ((all: string[]) => number),
  after: CutAfter,
  options: CuttingOptions = {},
): Promise<CuttingReplica> {
  const sockets = new Set<Socket>();
  const requests: Array<Record<string, unknown>> = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.once("end", async () => {
      requests.push(JSON.parse(body) as Record<string, unknown>);
      const all = (await straightFrom(model, req.url ?? "/", JSON.parse(body) as Record<string, unknown>)).split(/(?<=\n\n)/);
      res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" });
      if (options.firstEventMs !== undefined) {
        res.flushHeaders();
        await new Promise((resolve) => setTimeout(resolve, options.firstEventMs));
      }
      const count = typeof events === "number" ? events : events(all);
      for (const event of all.slice(0, count)) {
        if (res.destroyed) return;
        res.write(event);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      if (after === "reset") res.socket?.destroy();
      else if (after === "error") res.end(`data: ${JSON.stringify({ error: { object: "error", message: ENGINE_ERROR, type: "InternalServerError", param: null, code: 500 } })}\n\ndata: [DONE]\n\n`);
      else if (after === "end") res.end();
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    target: { instanceId, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null },
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The thinking and the answer of a reasoning replica, one token each. */
export const REASONING = ["Let", " me", " think", " about", " it", "."];
export const CONTENT = ["The", " answer", " is", " forty", "-two", "."];

export interface ReasoningReplica extends CuttingReplica {
  /** Its answers whose events it cut. */
  cuts: number;
}

/**
 * A reasoning model's replica as vLLM serves one with a reasoning parser: its role chunk, the
 * thinking as `reasoning_content` deltas, then the answer as `content` deltas, usage on every chunk
 * as asked (completion tokens count both). A request with `continue_final_message` continues the
 * final assistant message's answer from where it stops, without thinking again (vLLM's chat
 * template closes the thought before an assistant message). With `cutAfter`, its first answer is
 * cut (its connection reset) after that many events.
 */
export async function reasoningReplica(instanceId: string, cutAfter?: number): Promise<ReasoningReplica> {
  const sockets = new Set<Socket>();
  const requests: Array<Record<string, unknown>> = [];
  const replica = { cuts: 0 } as ReasoningReplica;
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.once("end", async () => {
      const request = JSON.parse(body) as { messages: Array<{ role: string; content: string }>; continue_final_message?: boolean; max_tokens: number };
      requests.push(request as unknown as Record<string, unknown>);
      const continued = request.continue_final_message === true ? request.messages.at(-1)!.content : undefined;
      const deltas: Array<Record<string, string>> = [];
      if (continued === undefined) deltas.push(...REASONING.map((token) => ({ reasoning_content: token })));
      let so = continued ?? "";
      for (const token of CONTENT) {
        if (so.startsWith(token)) so = so.slice(token.length);
        else if (so === "") deltas.push({ content: token });
      }
      const head = { id: `chatcmpl-${instanceId}-${requests.length}`, object: "chat.completion.chunk", created: 1, model: "reasoner" };
      const usage = (n: number) => ({ prompt_tokens: 12, total_tokens: 12 + n, completion_tokens: n });
      type Chunk = typeof head & { choices: Array<{ index: number; delta: Record<string, string>; finish_reason: string | null }>; usage: ReturnType<typeof usage> };
      const events: Chunk[] = [{ ...head, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }], usage: usage(0) }];
      const shown = deltas.slice(0, request.max_tokens);
      shown.forEach((delta, i) => events.push({ ...head, choices: [{ index: 0, delta, finish_reason: null }], usage: usage(i + 1) }));
      events.push({ ...head, choices: [{ index: 0, delta: {}, finish_reason: shown.length < deltas.length ? "length" : "stop" }], usage: usage(shown.length) });
      res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" });
      const cut = cutAfter !== undefined && replica.cuts === 0 ? cutAfter : undefined;
      for (const [i, event] of events.entries()) {
        if (i === cut) {
          replica.cuts += 1;
          res.socket?.destroy();
          return;
        }
        res.write(`data: ${JSON.stringify(event)}\n\n`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      res.end("data: [DONE]\n\n");
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return Object.assign(replica, {
    target: { instanceId, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null },
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  });
}
