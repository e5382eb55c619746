import { createServer, type Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import pino, { type Logger } from "pino";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import type { ConnectionTimeouts } from "../../src/config.js";
import { listTemplates } from "../../src/gpu/creation/templates.js";
import { startModelServer, type ModelServer, type ModelServerOptions } from "../../src/gpu/marketplace/simulated/model-server.js";
import type { EndpointDirectory, EndpointRoute, EndpointRouting, ProxyLoad, RouteTarget } from "../../src/module.js";
import { createAppHandler } from "../../src/server/app.js";
import { createTokenSource } from "../../src/server/auth/token-source.js";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createMetrics } from "../../src/server/metrics.js";
import { KeptBytes } from "../../src/server/proxy/kept-body.js";
import { createProxyLoad } from "../../src/server/proxy/proxy-load.js";
import { registration } from "../../src/server/service-registration.js";

// The product's handler serving the endpoint proxy over a directory that is just a list, as the
// endpoint controller's would be, with replicas that are real simulated model servers on loopback.

export const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";
export const CALLER_TOKEN = "caller-token";

export interface ProxyUnderTest {
  readonly url: string;
  /** Endpoint name -> its ready replicas; a name absent is an unknown endpoint. */
  readonly endpoints: Map<string, RouteTarget[]>;
  /** Endpoint name -> whether a replica is coming (held requests wait) and why not; absent: none coming. */
  readonly coming: Map<string, Pick<EndpointRoute, "coming" | "refusal">>;
  /** Endpoint name -> its routing; absent: none said (least outstanding, as an endpoint's route without one). */
  readonly routings: Map<string, EndpointRouting>;
  /** The proxy's counts (endpoint ids are the names here). */
  readonly load: ProxyLoad;
  /** The bytes of bodies the proxy keeps, and their bound. */
  readonly kept: KeptBytes;
  /** Stops the proxy's holding (the service stopping), then closes its port. */
  close(): Promise<void>;
}

export interface ProxyOptions {
  maxBodyBytes?: number;
  firstByteMs?: number;
  logger?: Logger;
  /** An AUTH_TOKENS_FILE whose tokens are accepted besides CALLER_TOKEN (every scope). */
  tokensFile?: string;
  /** Awaited before each directory answer: a slow directory (the database under load). */
  holdLookup?: (name: string) => Promise<void>;
  /** The connection timeouts of the proxy's port (the defaults without). */
  timeouts?: ConnectionTimeouts;
  /** GPU_ENDPOINT_HOLD_MS and GPU_ENDPOINT_HOLD_MAX (the defaults without). */
  hold?: { ms: number; max: number };
  /** GPU_ENDPOINT_STALL_MS and GPU_ENDPOINT_RESUME_MAX (the defaults without). */
  continuation?: { stallMs: number; resumeMax: number };
  /** The proxy's counts (a new one without). */
  load?: ProxyLoad;
  /** GPU_ENDPOINT_KEPT_BODY_BYTES (the default without). */
  keptBodyBytes?: number;
}

export async function startProxy(options: ProxyOptions = {}): Promise<ProxyUnderTest> {
  const endpoints = new Map<string, RouteTarget[]>();
  const coming = new Map<string, Pick<EndpointRoute, "coming" | "refusal">>();
  const routings = new Map<string, EndpointRouting>();
  const { holdLookup } = options;
  const directory: EndpointDirectory = {
    route: async (name) => {
      if (holdLookup !== undefined) await holdLookup(name);
      const targets = endpoints.get(name);
      // A copy, as the real directory's answers are.
      return targets === undefined ? undefined : { endpointId: name, targets: [...targets], coming: false, routing: routings.get(name), ...coming.get(name) };
    },
  };
  const load = options.load ?? createProxyLoad();
  const kept = new KeptBytes(options.keptBodyBytes);
  const shutdown = new AbortController();
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });
  const handler = createAppHandler({
    services: [registration(GpuService, { listTemplates: () => ({ templates: [...listTemplates()] }) })],
    logger,
    tokens: createTokenSource({ envTokens: [CALLER_TOKEN], file: options.tokensFile, logger }),
    readiness: {},
    maxBodyBytes: options.maxBodyBytes ?? 1024 * 1024,
    metrics: createMetrics(),
    endpoints: directory,
    endpointFirstByteMs: options.firstByteMs,
    endpointHold: options.hold,
    endpointContinuation: options.continuation,
    endpointLoad: load,
    endpointKept: kept,
    shutdown: shutdown.signal,
  });
  const server: RunningServer = await listen({ handler, host: "127.0.0.1", port: 0, timeouts: options.timeouts });
  return {
    url: server.url,
    endpoints,
    coming,
    routings,
    load,
    kept,
    close: () => {
      shutdown.abort();
      return server.close(500);
    },
  };
}

/** A simulated model server for instance `instanceId`, and the route to it. */
export async function startReplica(
  instanceId: string,
  options: Partial<ModelServerOptions> = {},
): Promise<{ server: ModelServer; target: RouteTarget }> {
  const server = await startModelServer({ model: MODEL, host: "127.0.0.1", instance: instanceId, ...options });
  return { server, target: { instanceId, url: `http://127.0.0.1:${server.port}`, apiKey: options.apiKey ?? null } };
}

export interface RecordingReplica {
  server: Server;
  target: RouteTarget;
  /** The `x-seq` header of each request, in arrival order. */
  seen: string[];
  /** The length of each request's body, in arrival order. */
  bodies: number[];
}

/** A replica that answers `status` at once once it has read a request, recording what it got. */
export async function recordingReplica(instanceId: string, status = 200): Promise<RecordingReplica> {
  const seen: string[] = [];
  const bodies: number[] = [];
  const server = createServer((req, res) => {
    seen.push(String(req.headers["x-seq"]));
    let bytes = 0;
    req.on("data", (chunk: Buffer) => (bytes += chunk.length));
    req.once("end", () => {
      bodies.push(bytes);
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify({ ok: status === 200 }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, target: { instanceId, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: null }, seen, bodies };
}

/** POST of a JSON body through the proxy with the caller's token. */
export function callEndpoint(proxy: ProxyUnderTest, path: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  return fetch(`${proxy.url}${path}`, {
    method: "POST",
    ...init,
    headers: { authorization: `Bearer ${CALLER_TOKEN}`, "content-type": "application/json", ...(init.headers as Record<string, string>) },
    body: JSON.stringify(body),
  });
}

/**
 * A caller on a raw socket that sends a POST's headers and `sent` bytes of a body (declared
 * `declared` bytes long, or chunked when undefined), 64 KiB more of it 100 ms later, and reads
 * nothing for `readAfterMs`: resolves with what it then read, or the error that ended its
 * connection after what it had read. A socket destroyed with body bytes unread, or that gets
 * more of them after it was destroyed, is reset, and the reset drops an answer not read yet.
 */
export function callReadingLate(proxy: ProxyUnderTest, path: string, sent: number, declared: number | undefined, readAfterMs = 300): Promise<string> {
  const { port } = new URL(proxy.url);
  const length = declared === undefined ? "transfer-encoding: chunked" : `content-length: ${declared}`;
  const part = (size: number) => {
    const bytes = Buffer.alloc(size, " ");
    return declared === undefined ? Buffer.concat([Buffer.from(`${size.toString(16)}\r\n`), bytes, Buffer.from("\r\n")]) : bytes;
  };
  return new Promise<string>((resolve) => {
    const socket = connect(Number(port), "127.0.0.1", () => {
      socket.write(`POST ${path} HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer ${CALLER_TOKEN}\r\ncontent-type: application/json\r\n${length}\r\n\r\n`);
      socket.write(part(sent));
      setTimeout(() => socket.writable && socket.write(part(64 * 1024)), 100);
    });
    socket.pause();
    let text = "";
    setTimeout(() => socket.on("data", (d: Buffer) => (text += d.toString())).resume(), readAfterMs);
    socket.on("error", (err) => resolve(`${err.message} after ${JSON.stringify(text)}`));
    socket.on("close", () => resolve(text));
  });
}

/** The value of one sample of the Prometheus text, 0 when absent. */
export async function metricValue(proxy: ProxyUnderTest, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${proxy.url}/metrics`, { headers: { authorization: `Bearer ${CALLER_TOKEN}` } })).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.split(" ").pop());
}
