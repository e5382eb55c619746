import http2 from "node:http2";
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createTemplatesOnlyHandler } from "../support/partial-app.js";

// Slow and idle clients are cut off on the plain port (HTTP/1.1 and HTTP/2 sniffed on one port):
// headers trickled a line at a time, bodies trickled a byte at a time, idle keep-alive connections
// and idle HTTP/2 sessions (no stream open: a quiet stream is bounded by its own limits). Short
// timeouts here; the defaults are in the README.

const TIMEOUTS = { headersMs: 400, requestMs: 400, keepAliveMs: 300, http2IdleMs: 500 };
// The timeouts above plus node:http's 1 s checking interval plus slack for a loaded machine.
const CUT_WITHIN_MS = 3_000;

let server: RunningServer;

beforeAll(async () => {
  server = await listen({ handler: createTemplatesOnlyHandler(), host: "127.0.0.1", port: 0, timeouts: TIMEOUTS });
});

afterAll(async () => {
  await server?.close(500);
});

/** Opens a raw TCP connection; `closed` resolves with what the server sent and when it closed. */
function rawConnection(): { socket: Socket; closed: Promise<{ afterMs: number; received: string }> } {
  const started = Date.now();
  const socket = connect(server.port, "127.0.0.1");
  let received = "";
  socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
  socket.on("error", () => undefined);
  const closed = new Promise<{ afterMs: number; received: string }>((resolve) =>
    socket.once("close", () => resolve({ afterMs: Date.now() - started, received })),
  );
  return { socket, closed };
}

/** Writes `parts` one every `everyMs` until the socket closes. */
function trickle(socket: Socket, parts: () => string, everyMs: number): void {
  const timer = setInterval(() => {
    if (socket.destroyed) clearInterval(timer);
    else socket.write(parts());
  }, everyMs);
  socket.once("close", () => clearInterval(timer));
}

describe("connection timeouts", () => {
  it("cuts off HTTP/1.1 headers sent one line at a time", async () => {
    const { socket, closed } = rawConnection();
    socket.write("GET /api/gpu/templates HTTP/1.1\r\nHost: x\r\n");
    let n = 0;
    trickle(socket, () => `X-Slow-${n++}: y\r\n`, 100);
    const { afterMs, received } = await closed;
    expect(afterMs).toBeLessThan(CUT_WITHIN_MS);
    expect(received).not.toContain("200 OK");
  });

  it("answers 408 to an HTTP/1.1 body trickled a byte at a time, and closes", async () => {
    const { socket, closed } = rawConnection();
    socket.write("POST /gpu.v1.GpuService/ListTemplates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n");
    trickle(socket, () => " ", 100);
    const { afterMs, received } = await closed;
    expect(afterMs).toBeLessThan(CUT_WITHIN_MS);
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
  });

  it("closes an idle keep-alive connection", async () => {
    const { socket, closed } = rawConnection();
    socket.write("GET /api/gpu/templates HTTP/1.1\r\nHost: x\r\n\r\n");
    const { afterMs, received } = await closed;
    expect(received).toMatch(/^HTTP\/1\.1 200 /);
    expect(afterMs).toBeLessThan(CUT_WITHIN_MS);
  });

  it("closes an idle HTTP/2 session", async () => {
    const started = Date.now();
    const session = http2.connect(server.url);
    session.on("error", () => undefined);
    await new Promise((resolve) => session.once("close", resolve));
    expect(Date.now() - started).toBeLessThan(CUT_WITHIN_MS);
  });

  it("closes an HTTP/2 session once it is idle again after its last stream", async () => {
    const session = http2.connect(server.url);
    session.on("error", () => undefined);
    const closed = new Promise((resolve) => session.once("close", resolve));
    const stream = session.request({ ":path": "/api/gpu/templates" });
    stream.resume();
    await new Promise((resolve) => stream.once("close", resolve));
    const answered = Date.now();
    await closed;
    expect(Date.now() - answered).toBeLessThan(CUT_WITHIN_MS);
  });

  it("answers 408 to an HTTP/2 body trickled a byte at a time", async () => {
    const session = http2.connect(server.url);
    session.on("error", () => undefined);
    const stream = session.request({ ":method": "POST", ":path": "/gpu.v1.GpuService/ListTemplates", "content-type": "application/json" });
    stream.on("error", () => undefined);
    const timer = setInterval(() => stream.write(" "), 100);
    const started = Date.now();
    const status = await new Promise<number | undefined>((resolve) => {
      stream.once("response", (headers) => resolve(headers[":status"]));
      stream.once("close", () => resolve(undefined));
    });
    clearInterval(timer);
    session.destroy();
    expect(status).toBe(408);
    expect(Date.now() - started).toBeLessThan(CUT_WITHIN_MS);
  });
});

describe("protocol sniffing", () => {
  it("serves HTTP/1.1 whose first TCP segment is a single byte", async () => {
    const { socket, closed } = rawConnection();
    socket.setNoDelay(true);
    socket.write("P");
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket.write("OST /api/gpu/templates HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    const { received } = await closed;
    // A POST on a GET route: the HTTP/1.1 server parsed the request and answered it.
    expect(received).toMatch(/^HTTP\/1\.1 405 /);
  });
});
