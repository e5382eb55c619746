import { readFileSync } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { DEFAULT_TIMEOUTS, type ConnectionTimeouts } from "../config.js";
import type { NodeHandler } from "./node-http.js";

export interface ListenOptions {
  handler: NodeHandler;
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** With a certificate, TLS with ALPN negotiates HTTP/2 or HTTP/1.1 per connection. */
  tls?: { certFile: string; keyFile: string };
  timeouts?: ConnectionTimeouts;
}

export interface RunningServer {
  readonly port: number;
  readonly url: string;
  /** Stops accepting connections, lets in-flight requests finish, then closes idle ones. */
  close(graceMs?: number): Promise<void>;
}

// Every HTTP/2 connection without TLS starts with this preface ("prior knowledge" h2c, as gRPC
// clients speak it); HTTP/1.1 requests start with a method name, and no method is "PRI".
const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/**
 * Serves HTTP/1.1 and HTTP/2 on one port. Without TLS it reads the first bytes of each new
 * connection and hands the socket to a node:http or a node:http2 server sharing one handler.
 */
export async function listen(options: ListenOptions): Promise<RunningServer> {
  const timeouts = options.timeouts ?? DEFAULT_TIMEOUTS;
  // On the plain port node:http times HTTP/1.1 bodies itself (its requestTimeout, below).
  const handler = withRequestTimeout(options.handler, timeouts.requestMs, options.tls ? "every request" : "http/2 only");
  const sockets = new Set<net.Socket>();
  let front: net.Server;
  let h1: http.Server | undefined;
  let h2: http2.Http2Server | http2.Http2SecureServer;

  if (options.tls) {
    const secure = http2.createSecureServer(
      { cert: readFileSync(options.tls.certFile), key: readFileSync(options.tls.keyFile), allowHTTP1: true },
      handler,
    );
    // Its HTTP/1.1 connections (ALPN said so) get the same limits as on the plain port.
    Object.assign(secure, {
      headersTimeout: timeouts.headersMs,
      requestTimeout: timeouts.headersMs + timeouts.requestMs,
      keepAliveTimeout: timeouts.keepAliveMs,
      connectionsCheckingInterval: Math.min(1_000, timeouts.headersMs),
    });
    h2 = front = secure;
  } else {
    h1 = http.createServer(
      {
        headersTimeout: timeouts.headersMs,
        requestTimeout: timeouts.headersMs + timeouts.requestMs,
        keepAliveTimeout: timeouts.keepAliveMs,
        connectionsCheckingInterval: Math.min(1_000, timeouts.headersMs),
      },
      handler,
    );
    // node:http checks header and request timeouts on a timer it starts on 'listening'. This
    // server never listens (it gets its sockets from the front server), so start the timer here.
    h1.emit("listening");
    // Its only socket timer is the keep-alive one (server.timeout is 0): a listener takes the close over.
    h1.on("timeout", closeIfStillIdle);
    h2 = http2.createServer(handler);
    const plain = [h1, h2] as const;
    front = net.createServer((socket) => {
      socket.once("error", () => socket.destroy());
      // A connection that never sends enough to be told apart is never handed over: cut it off.
      const cutOff = () => socket.destroy();
      socket.setTimeout(timeouts.headersMs, cutOff);
      sniffProtocol(socket, (isHttp2) => {
        socket.setTimeout(0);
        // Left on, it would destroy the connection the first time node:http's keep-alive timer fires.
        socket.off("timeout", cutOff);
        if (isHttp2) {
          // The HTTP/2 session reads what is already buffered on the socket, then takes it over.
          plain[1].emit("connection", socket);
        } else {
          plain[0].emit("connection", socket);
          // On the next tick, once node:http has taken the socket: resumed at once, the socket
          // reads a request's whole body whether or not anyone reads it (no backpressure), and a
          // request refused before its body is read would still take all of it into memory.
          process.nextTick(() => socket.resume());
        }
      });
    });
  }
  closeIdleSessions(h2, timeouts.http2IdleMs);
  front.on("connection", (socket: net.Socket) => {
    // As node:http does for the sockets it accepts itself: without it, a streamed answer's small
    // writes wait for the caller's delayed ACK (Nagle), tens of milliseconds per event.
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  const sessions = new Set<http2.Http2Session>();
  h2.on("session", (session: http2.Http2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });

  await new Promise<void>((resolve, reject) => {
    front.once("error", reject);
    front.listen(options.port, options.host, () => {
      front.off("error", reject);
      resolve();
    });
  });
  const port = (front.address() as net.AddressInfo).port;
  const scheme = options.tls ? "https" : "http";
  const urlHost = options.host.includes(":") ? `[${options.host}]` : options.host;

  return {
    port,
    url: `${scheme}://${urlHost === "0.0.0.0" ? "127.0.0.1" : urlHost}:${port}`,
    async close(graceMs = 10_000) {
      const closed = new Promise<void>((resolve) => front.close(() => resolve()));
      for (const session of sessions) session.close();
      // Keep-alive HTTP/1.1 connections become idle as their last response ends.
      h1?.closeIdleConnections();
      const sweeper = setInterval(() => h1?.closeIdleConnections(), 50);
      const timer = setTimeout(() => {
        for (const socket of sockets) socket.destroy();
      }, graceMs);
      await closed;
      clearInterval(sweeper);
      clearTimeout(timer);
    },
  };
}

/**
 * Reads until the bytes tell HTTP/2's preface from an HTTP/1.1 request line (a first TCP segment
 * may hold a single byte), puts them back, and calls `decide` with the socket paused.
 */
function sniffProtocol(socket: net.Socket, decide: (isHttp2: boolean) => void): void {
  let received = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    received = Buffer.concat([received, chunk]);
    const compared = Math.min(received.length, HTTP2_PREFACE.length);
    const matches = received.subarray(0, compared).equals(HTTP2_PREFACE.subarray(0, compared));
    if (matches && compared < HTTP2_PREFACE.length) return;
    socket.off("data", onData);
    socket.pause();
    socket.unshift(received);
    decide(matches);
  };
  socket.on("data", onData);
}

/**
 * Closes an HTTP/2 session (GOAWAY, then the connection) that has had no stream open for `idleMs`.
 * A session with a stream open is not idle, however quiet: a proxied request may wait minutes
 * for a cold model's first byte (GPU_ENDPOINT_FIRST_BYTE_MS) with no frame either way. Node's own
 * session timeout (`server.setTimeout`) counts frames, and would cut that request off. A stream
 * has its own limits: HTTP_REQUEST_TIMEOUT_MS for its body, the proxy's first-byte wait.
 */
function closeIdleSessions(h2: http2.Http2Server | http2.Http2SecureServer, idleMs: number): void {
  h2.on("session", (session: http2.Http2Session) => {
    let open = 0;
    let timer: NodeJS.Timeout | undefined;
    const idle = () => {
      timer = setTimeout(() => session.close(), idleMs);
      timer.unref();
    };
    idle();
    session.on("stream", (stream: http2.ServerHttp2Stream) => {
      open += 1;
      clearTimeout(timer);
      stream.once("close", () => {
        open -= 1;
        if (open === 0 && !session.closed && !session.destroyed) idle();
      });
    });
    session.once("close", () => clearTimeout(timer));
  });
}

/**
 * Cuts off a request whose body has not fully arrived `requestMs` after its headers: 408 when
 * nothing was answered yet, then the request (an HTTP/2 stream, or the HTTP/1.1 connection) is
 * destroyed. Trickled bodies otherwise hold a connection for ever. `http/2 only`: node:http's own
 * requestTimeout answers HTTP/1.1's 408, and a request pays for no timer of its own.
 */
function withRequestTimeout(handler: NodeHandler, requestMs: number, which: "every request" | "http/2 only"): NodeHandler {
  return (req, res) => {
    if (which === "http/2 only" && req.httpVersionMajor === 1) return handler(req, res);
    const timer = setTimeout(() => {
      if (req.complete) return;
      if (res.headersSent) {
        req.destroy();
        return;
      }
      res.writeHead(408, { "content-type": "application/json", connection: "close" });
      res.end(JSON.stringify({ detail: "request body not received in time" }), () => req.destroy());
    }, requestMs);
    timer.unref();
    res.once("close", () => clearTimeout(timer));
    handler(req, res);
  };
}

/**
 * Closes a keep-alive connection whose idle timer fell due, unless a request reached it meanwhile.
 * node:http destroys it at once, and in a lagging event loop (a loaded machine) a request the
 * caller wrote on it in the same round of timers is then still unread: destroyed with it, the
 * caller sees a reset, never an answer. Decided after the loop's next read of its sockets (the
 * check phase comes after the poll): a request already sent is read first and answered.
 */
function closeIfStillIdle(socket: net.Socket): void {
  const read = socket.bytesRead;
  setImmediate(() => {
    if (socket.bytesRead === read) socket.destroy();
  });
}
