import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { answerCompletion, sendError, sendJson, type CompletionStats } from "./completions.js";
import { createPrefixCache, type PrefixCacheCounts } from "./prefix-cache.js";
import { createPrefillLane } from "./prefill-lane.js";
import { prefixCacheMetrics } from "./model-metrics.js";

// A tiny OpenAI-compatible model server, as an LLM container exposes it: `GET /health`,
// `GET /v1/models`, completions (completions.ts) streamed or whole, and `GET /metrics` with vLLM's
// prefix-cache counters (prefix-cache.ts, model-metrics.ts); it reads one prompt at a time
// (prefill-lane.ts). The simulated marketplace runs one per model-serving instance on loopback so
// that GpuService's health probes and the endpoint proxy's requests are real network calls that
// can really fail. Started with a key (vLLM's --api-key / VLLM_API_KEY), it answers every /v1/...
// call without `Authorization: Bearer <key>` with 401, as vLLM does; /health stays open.

export interface ModelServer {
  readonly port: number;
  /** Completions answered, and those whose client left before the end. */
  readonly stats: Readonly<CompletionStats>;
  /** Prompt tokens asked for and found in its prefix cache. */
  readonly prefixCache: Readonly<PrefixCacheCounts>;
  close(): Promise<void>;
}

export interface ModelServerOptions {
  model: string;
  host: string;
  /** 0 for any free port; a previous port is tried first on restart so the mapping stays put. */
  port?: number;
  /** The key /v1/... demands; undefined: none (servers of instances created before keys). */
  apiKey?: string;
  /** The machine it runs on, named in every completion; "simulated" when not given. */
  instance?: string;
  /** Time between two generated tokens, ms (default 20). */
  tokenDelayMs?: number;
  /** Time before the first token whatever the prompt, ms (default 0: a one-token answer comes at once). */
  firstTokenMs?: number;
  /** Time to read a thousand prompt tokens its prefix cache does not hold, ms (default 0: none); one prompt at a time. */
  prefillMsPerKtoken?: number;
  /** Its prefix cache's KV budget, tokens (default DEFAULT_KV_CACHE_TOKENS; 0: no prefix caching). */
  kvCacheTokens?: number;
}

/** A 24 GB GPU's KV cache beside a 7B model's weights, roughly. */
const DEFAULT_KV_CACHE_TOKENS = 65_536;

export async function startModelServer(options: ModelServerOptions): Promise<ModelServer> {
  const created = Math.floor(Date.now() / 1000);
  const stats: CompletionStats = { completions: 0, abandoned: 0 };
  const settings = {
    model: options.model,
    instance: options.instance ?? "simulated",
    firstTokenMs: options.firstTokenMs ?? 0,
    prefillMsPerKtoken: options.prefillMsPerKtoken ?? 0,
    tokenDelayMs: options.tokenDelayMs ?? 20,
  };
  const cache = createPrefixCache(options.kvCacheTokens ?? DEFAULT_KV_CACHE_TOKENS);
  const engine = { cache, lane: createPrefillLane() };
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method === "GET" && path === "/health") return sendJson(res, 200, { status: "ok" });
    // Open like /health: vLLM's key guards /v1/... only.
    if (req.method === "GET" && path === "/metrics") {
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
      return res.end(prefixCacheMetrics(options.model, cache.counts));
    }
    if (path?.startsWith("/v1/") && options.apiKey !== undefined && !presents(req.headers.authorization, options.apiKey)) {
      req.resume();
      return sendJson(res, 401, { error: "Unauthorized" });
    }
    if (req.method === "POST" && (path === "/v1/chat/completions" || path === "/v1/completions")) {
      const kind = path === "/v1/chat/completions" ? "chat" : "text";
      answerCompletion(kind, req, res, settings, stats, engine).catch(() => res.destroy());
      return;
    }
    req.resume();
    if (path === "/v1/models" && req.method === "GET") {
      return sendJson(res, 200, {
        object: "list",
        data: [{ id: options.model, object: "model", created, owned_by: "simulated-marketplace" }],
      });
    }
    if (path === "/health" || path === "/v1/models" || path === "/v1/chat/completions" || path === "/v1/completions") {
      return sendError(res, 405, "method not allowed");
    }
    sendError(res, 404, `no route ${path}`);
  });
  // Probes come and go; idle keep-alive sockets must not hold close() up. Five seconds, as
  // uvicorn (vLLM's server) keeps an idle connection.
  server.keepAliveTimeout = 5000;
  const port = await listenOn(server, options.host, options.port ?? 0).catch((err: unknown) => {
    if (options.port && isAddressInUse(err)) return listenOn(server, options.host, 0);
    throw err;
  });
  return {
    port,
    stats,
    prefixCache: cache.counts,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Constant-time comparison of the presented bearer token with the key. */
function presents(authorization: string | undefined, key: string): boolean {
  const given = createHash("sha256").update(/^Bearer (.*)$/.exec(authorization ?? "")?.[1] ?? "").digest();
  return timingSafeEqual(given, createHash("sha256").update(key).digest()) && authorization !== undefined;
}

function listenOn(server: Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once("error", onError);
    server.listen(port, host, () => {
      server.off("error", onError);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

function isAddressInUse(err: unknown): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === "EADDRINUSE";
}
