import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import https from "node:https";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createTemplatesOnlyHandler } from "../support/partial-app.js";

// With TLS_CERT_FILE/TLS_KEY_FILE the port speaks TLS and ALPN picks HTTP/2 or HTTP/1.1.

const dir = mkdtempSync(join(tmpdir(), "tls-"));
let server: RunningServer;

beforeAll(async () => {
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
    "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")], { stdio: "ignore" });
  const handler = createTemplatesOnlyHandler();
  server = await listen({ handler, host: "127.0.0.1", port: 0, tls: { certFile: join(dir, "cert.pem"), keyFile: join(dir, "key.pem") } });
});

afterAll(async () => {
  await server?.close(500);
  rmSync(dir, { recursive: true, force: true });
});

describe("TLS", () => {
  it("closes an idle HTTP/1.1 keep-alive connection after HTTP_KEEP_ALIVE_TIMEOUT_MS, as on the plain port", async () => {
    const short = await listen({
      handler: createTemplatesOnlyHandler(),
      host: "127.0.0.1",
      port: 0,
      tls: { certFile: join(dir, "cert.pem"), keyFile: join(dir, "key.pem") },
      timeouts: { headersMs: 400, requestMs: 400, keepAliveMs: 300, http2IdleMs: 60_000 },
    });
    try {
      const socket = tls.connect({ port: short.port, host: "127.0.0.1", rejectUnauthorized: false, ALPNProtocols: ["http/1.1"] });
      socket.on("error", () => undefined);
      let received = "";
      socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
      const closed = new Promise((resolve) => socket.once("close", resolve));
      socket.write("GET /api/gpu/templates HTTP/1.1\r\nHost: x\r\n\r\n");
      const started = Date.now();
      await closed;
      expect(received).toMatch(/^HTTP\/1\.1 200 /);
      expect(Date.now() - started).toBeLessThan(3_000);
    } finally {
      await short.close(500);
    }
  });

  it("serves HTTP/1.1 clients", async () => {
    expect(server.url).toMatch(/^https:/);
    const { status, version, body } = await new Promise<{ status: number; version: string; body: string }>((resolve, reject) => {
      https
        .get(`${server.url}/api/gpu/templates`, { rejectUnauthorized: false }, (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, version: res.httpVersion, body }));
        })
        .on("error", reject);
    });
    expect([status, version]).toEqual([200, "1.1"]);
    expect((JSON.parse(body) as { templates: unknown[] }).templates).toHaveLength(3);
  });

  it("serves HTTP/2 clients negotiated by ALPN", async () => {
    const session = http2.connect(server.url, { rejectUnauthorized: false });
    try {
      const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = session.request({ ":path": "/api/gpu/templates" });
        let status = 0;
        let body = "";
        req.on("response", (headers) => (status = Number(headers[":status"])));
        req.on("data", (c: Buffer) => (body += c.toString()));
        req.on("end", () => resolve({ status, body }));
        req.on("error", reject);
      });
      expect(status).toBe(200);
      expect((JSON.parse(body) as { templates: unknown[] }).templates).toHaveLength(3);
      expect(session.alpnProtocol).toBe("h2");
    } finally {
      session.close();
    }
  });
});
