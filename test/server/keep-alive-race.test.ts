import { Agent, request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createTemplatesOnlyHandler } from "../support/partial-app.js";

// A caller gets an answer or a status, never a reset (bench:serve's night: a request reset before
// its answer). node:http closes an idle keep-alive connection when its timer falls due
// (HTTP_KEEP_ALIVE_TIMEOUT_MS plus node's own 1 s); node's Agent, without a `timeout` of its own,
// keeps idle sockets for ever. When the process's event loop lags (a loaded machine), a caller's
// request written on such a connection in the same round of timers as that timer was reset: the
// server destroyed the connection before its loop read the request waiting on it.

// node's Agent keeps a socket only when the server's Keep-Alive hint (whole seconds) is over its own 1 s buffer.
const KEEP_ALIVE_MS = 2_000;
/** When node:http's timer on an idle connection falls due after its last answer. */
const DUE_MS = KEEP_ALIVE_MS + 1_000;

let server: RunningServer;

beforeAll(async () => {
  server = await listen({
    handler: createTemplatesOnlyHandler(),
    host: "127.0.0.1",
    port: 0,
    timeouts: { headersMs: 5_000, requestMs: 5_000, keepAliveMs: KEEP_ALIVE_MS, http2IdleMs: 5_000 },
  });
});

afterAll(async () => {
  await server?.close(500);
});

type Outcome = { status?: number; error?: string; reused: boolean };

function get(agent: Agent): Promise<Outcome> {
  return new Promise((resolve) => {
    const req = request({ agent, host: "127.0.0.1", port: server.port, path: "/api/gpu/templates", method: "GET" }, (res) => {
      res.resume();
      res.once("end", () => resolve({ status: res.statusCode, reused: req.reusedSocket }));
    });
    req.once("error", (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message, reused: req.reusedSocket }));
    req.end();
  });
}

/** Blocks the event loop, as a loaded machine does. */
function lag(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe("an idle keep-alive connection", () => {
  it("answers a request written on it in the round of timers in which its keep-alive timer falls due", async () => {
    const outcomes: Outcome[] = [];
    for (let i = 0; i < 2; i++) {
      const agent = new Agent({ keepAlive: true });
      expect(await get(agent)).toMatchObject({ status: 200, reused: false });
      // The caller's timer falls due just before the server's; the loop stalls past both, so that
      // they run in one round, the caller's first: its request is written, then the server's timer fires.
      const answer = new Promise<Outcome>((resolve) => setTimeout(() => void get(agent).then(resolve), DUE_MS - 150));
      setTimeout(() => setImmediate(() => lag(400)), DUE_MS - 300);
      outcomes.push(await answer);
      agent.destroy();
    }
    expect(outcomes).toEqual(outcomes.map(() => ({ status: 200, reused: true })));
  });

  it("is still closed when it stays idle", async () => {
    const agent = new Agent({ keepAlive: true });
    expect(await get(agent)).toMatchObject({ status: 200 });
    const [socket] = Object.values(agent.freeSockets).flat();
    const from = performance.now();
    await new Promise((resolve) => socket!.once("close", resolve));
    expect(performance.now() - from).toBeLessThan(DUE_MS + 1_000);
    agent.destroy();
  });
});
