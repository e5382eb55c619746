import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

// A tiny OpenAI-compatible model server, as an LLM container exposes it: `GET /health` and
// `GET /v1/models`. The simulated marketplace runs one per model-serving instance on loopback so
// that GpuService's health probes are real network calls that can really fail. Started with a key
// (vLLM's --api-key / VLLM_API_KEY), it answers every /v1/... call without `Authorization: Bearer
// <key>` with 401, as vLLM does; /health stays open.

export interface ModelServer {
  readonly port: number;
  close(): Promise<void>;
}

export interface ModelServerOptions {
  model: string;
  host: string;
  /** 0 for any free port; a previous port is tried first on restart so the mapping stays put. */
  port?: number;
  /** The key /v1/... demands; undefined: none (servers of instances created before keys). */
  apiKey?: string;
}

export async function startModelServer(options: ModelServerOptions): Promise<ModelServer> {
  const created = Math.floor(Date.now() / 1000);
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (path?.startsWith("/v1/") && options.apiKey !== undefined && !presents(req.headers.authorization, options.apiKey)) {
      return send(401, { error: "Unauthorized" });
    }
    if (req.method !== "GET") return send(405, { error: { message: "method not allowed" } });
    if (path === "/health") return send(200, { status: "ok" });
    if (path === "/v1/models") {
      return send(200, {
        object: "list",
        data: [{ id: options.model, object: "model", created, owned_by: "simulated-marketplace" }],
      });
    }
    send(404, { error: { message: `no route ${path}` } });
  });
  // Probes come and go; idle keep-alive sockets must not hold close() up.
  server.keepAliveTimeout = 1000;
  const port = await listenOn(server, options.host, options.port ?? 0).catch((err: unknown) => {
    if (options.port && isAddressInUse(err)) return listenOn(server, options.host, 0);
    throw err;
  });
  return {
    port,
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
