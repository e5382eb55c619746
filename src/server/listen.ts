import { readFileSync } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { NodeHandler } from "./app.js";

export interface ListenOptions {
  handler: NodeHandler;
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** With a certificate, TLS with ALPN negotiates HTTP/2 or HTTP/1.1 per connection. */
  tls?: { certFile: string; keyFile: string };
}

export interface RunningServer {
  readonly port: number;
  readonly url: string;
  /** Stops accepting connections, lets in-flight requests finish, then closes idle ones. */
  close(graceMs?: number): Promise<void>;
}

// Every HTTP/2 connection without TLS starts with this preface ("prior knowledge" h2c, as gRPC
// clients speak it); HTTP/1.1 requests start with a method name, and no method is "PRI".
const HTTP2_PREFACE_START = Buffer.from("PRI * HTTP/2");
const FIRST_BYTE_TIMEOUT_MS = 30_000;

/**
 * Serves HTTP/1.1 and HTTP/2 on one port. Without TLS it reads the first bytes of each new
 * connection and hands the socket to a node:http or a node:http2 server sharing one handler.
 */
export async function listen(options: ListenOptions): Promise<RunningServer> {
  const { handler } = options;
  const sockets = new Set<net.Socket>();
  let front: net.Server;
  let h1: http.Server | undefined;
  let h2: http2.Http2Server | http2.Http2SecureServer;

  if (options.tls) {
    h2 = http2.createSecureServer(
      { cert: readFileSync(options.tls.certFile), key: readFileSync(options.tls.keyFile), allowHTTP1: true },
      handler,
    );
    front = h2;
  } else {
    h1 = http.createServer(handler);
    h2 = http2.createServer(handler);
    const plain = [h1, h2] as const;
    front = net.createServer((socket) => {
      socket.once("error", () => socket.destroy());
      // A connection that never sends a byte is never handed over: do not keep it forever.
      socket.setTimeout(FIRST_BYTE_TIMEOUT_MS, () => socket.destroy());
      socket.once("data", (chunk: Buffer) => {
        socket.setTimeout(0);
        socket.pause();
        socket.unshift(chunk);
        const isHttp2 = HTTP2_PREFACE_START.subarray(0, chunk.length).equals(chunk.subarray(0, HTTP2_PREFACE_START.length));
        if (isHttp2) {
          // The HTTP/2 session reads what is already buffered on the socket, then takes it over.
          plain[1].emit("connection", socket);
        } else {
          plain[0].emit("connection", socket);
          socket.resume();
        }
      });
    });
  }
  front.on("connection", (socket: net.Socket) => {
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
