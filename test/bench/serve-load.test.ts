import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callerAgent, listenQueueOf, newTally, streamOnce } from "../../bench/serving/parts/serve-load.js";
import { listen, type RunningServer } from "../../src/server/listen.js";

// bench:serve's callers against the real server: a caller gets an answer or a status, never a
// reset. An HTTP/1.1 server may close a connection idle past its keep-alive timeout, and says how
// long that is (`Keep-Alive: timeout=N`); a request written on it after the server closed it, before
// the caller's loop read that close, is reset (RFC 9112, 9.3.1: such a request is lost with the
// connection). A well-behaved caller stops using an idle connection before the timeout it was told.

// The server's hint is whole seconds; node's agent keeps a connection only under a hint over its own 1 s margin.
const KEEP_ALIVE_MS = 2_000;
/** When node:http's timer on an idle connection falls due after its last answer (its own 1 s on top). */
const DUE_MS = KEEP_ALIVE_MS + 1_000;

let server: RunningServer;

beforeAll(async () => {
  server = await listen({
    // A streamed completion's whole answer, once the request has come.
    handler: (req, res) => {
      req.resume();
      req.once("end", () => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.end("data: [DONE]\n\n");
      });
    },
    host: "127.0.0.1",
    port: 0,
    timeouts: { headersMs: 5_000, requestMs: 5_000, keepAliveMs: KEEP_ALIVE_MS, http2IdleMs: 5_000 },
  });
});

afterAll(async () => {
  await server?.close(500);
});

/** Blocks the event loop, as a loaded machine does. */
function lag(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe("bench:serve's callers", () => {
  it("never send on a connection the server closed for idleness: the next request is answered", async () => {
    const agent = callerAgent();
    const tally = newTally();
    await streamOnce(agent, server.port, "e", 1, tally, 0);
    expect(tally.answered).toBe(1);
    // The loop stalls past the server's idle timer and a caller's timer just after it: both run in
    // one round, the server's first. The server closes the connection at the end of that round
    // (listen.ts: after the loop's next read of its sockets, no request having come); the caller
    // sends in the same round, after that close and before its own loop has read it.
    const next = new Promise<void>((resolve) =>
      setTimeout(() => setImmediate(() => void streamOnce(agent, server.port, "e", 1, tally, 0).then(resolve)), DUE_MS + 50),
    );
    setTimeout(() => setImmediate(() => lag(500)), DUE_MS - 300);
    await next;
    agent.destroy();
    expect(tally.beforeAnswer).toEqual([]);
    expect(tally.answered).toBe(2);
  });

  it("read the service's accept queue when a new connection fails (Linux)", () => {
    if (process.platform !== "linux") return;
    expect(listenQueueOf(server.port)).toMatch(/^accept queue 0 \(node's backlog 511\), \d+ half-open$/);
  });
});
