import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { excerpt } from "../errors.js";
import { ENDPOINT_PROXY_DEFAULTS } from "../config.js";
import type { Logger } from "pino";
import type { EndpointDirectory, KeyUsage, ProxyLoad, ProxyTraffic } from "../module.js";
import { createAccessCheck, sendRefusal } from "./auth/access-check.js";
import { checkRpc, createAuthInterceptor } from "./auth/auth-interceptor.js";
import { scopeOfHttpPath } from "./auth/scope-table.js";
import type { TokenSource } from "./auth/token-source.js";
import type { KeyDirectory } from "./keys/key-directory.js";
import type { KeyAdmission } from "./keys/key-admission.js";
import { createErrorInterceptor } from "./error-interceptor.js";
import { createHealthHandler, type ReadinessChecks, type ReadinessDetails } from "./health.js";
import type { Metrics } from "./metrics.js";
import type { ApiHints } from "./openapi/api-hints.js";
import { createApiDocs } from "./openapi/api-docs.js";
import { createDashboardHandler } from "./dashboard/dashboard-handler.js";
import { createKeyUsageMetrics } from "./keys/key-usage-metrics.js";
import { createInProcessCaller } from "./rest/in-process-caller.js";
import { createRpcHandler } from "./rpc-handler.js";
import { createRestHandler } from "./rest/rest-handler.js";
import { sendJson, type NodeHandler, type NodeRequest, type NodeResponse } from "./node-http.js";
import { ENDPOINT_PREFIX, ENDPOINT_ROUTE, parseEndpointPath } from "./proxy/endpoint-path.js";
import { createEndpointProxy, type SettledAnswer } from "./proxy/endpoint-proxy.js";
import { sendRefusalBody } from "./proxy/refusal-body.js";
import { KeptBytes } from "./proxy/kept-body.js";
import { createProxyMetrics } from "./proxy/proxy-metrics.js";
import { withTraffic } from "./proxy/proxy-traffic.js";
import type { ServiceRegistration } from "./service-registration.js";

export interface AppOptions {
  services: readonly ServiceRegistration[];
  logger: Logger;
  /** The accepted tokens and their scopes (server/auth/); a source with none turns auth off. */
  tokens: TokenSource;
  /** The keys for callers of the endpoints (server/keys/), in memory; without it no key is accepted. */
  keys?: KeyDirectory;
  /** Where a key's limits admit and settle each of its proxied requests; without it limits are not kept. */
  keyAdmission?: KeyAdmission;
  readiness: ReadinessChecks;
  /** What /readyz reports besides its checks, never failing it (the GPU sync leadership). */
  readinessDetails?: ReadinessDetails;
  maxBodyBytes: number;
  metrics: Metrics;
  /** What the services' code knows about their REST contract beyond the protos (OpenAPI document). */
  apiHints?: ApiHints;
  /** Where `/endpoints/{name}/v1/...` finds ready replicas; without it that path answers 404. */
  endpoints?: EndpointDirectory;
  /** The endpoint proxy's wait for a replica's first answer byte, ms (GPU_ENDPOINT_FIRST_BYTE_MS). */
  endpointFirstByteMs?: number;
  /** How long and how many requests may wait for a replica (GPU_ENDPOINT_HOLD_MS, GPU_ENDPOINT_HOLD_MAX). */
  endpointHold?: { ms: number; max: number };
  /** Streamed answers cut by their replica: when a silent one counts as cut, and how often one is continued (GPU_ENDPOINT_STALL_MS, GPU_ENDPOINT_RESUME_MAX). */
  endpointContinuation?: { stallMs: number; resumeMax: number };
  /** The proxy's prefix index: how long a block is taken to be cached, and how many a replica keeps (GPU_ENDPOINT_PREFIX_TTL_MS, GPU_ENDPOINT_PREFIX_MAX_BLOCKS). */
  endpointPrefix?: { ttlMs: number; maxBlocks: number };
  /** Where the proxy counts its requests in flight and held, for the load publisher. */
  endpointLoad?: ProxyLoad;
  /** The bytes of bodies the proxy may keep for holding and retries (GPU_ENDPOINT_KEPT_BODY_BYTES); its default without. */
  endpointKept?: KeptBytes;
  /** Where the proxy counts its answers per endpoint and minute, for the endpoints' history. */
  endpointTraffic?: ProxyTraffic;
  /** Where the proxy counts each caller's usage per endpoint and minute, for the keys' usage. */
  endpointUsage?: KeyUsage;
  /** Aborted when the service stops: requests held by the proxy are answered 503 at once. */
  shutdown?: AbortSignal;
}


/**
 * One Node request handler for everything the port serves: Connect, gRPC and gRPC-Web through
 * the RPC handler (rpc-handler.ts), and, for anything it does not match, health checks, metrics,
 * the API docs (/openapi.json, /docs) and the REST routes derived from the google.api.http
 * annotations.
 */
export function createAppHandler(options: AppOptions): NodeHandler {
  const { services, logger, metrics } = options;
  const checkAccess = createAccessCheck(options.tokens, options.keys);
  const interceptors: Interceptor[] = [createErrorInterceptor(logger), createAuthInterceptor(checkAccess)];
  const routes = (router: ConnectRouter) => {
    for (const service of services) service.route(router);
  };
  const handleHealth = createHealthHandler(options.readiness, options.readinessDetails);
  const handleDashboard = createDashboardHandler();
  const apiDocs = createApiDocs({
    services: services.map((s) => s.desc),
    hints: options.apiHints ?? {},
    authEnabled: options.tokens.enabled,
  });
  const handleRest = createRestHandler({
    services: services.map((s) => s.desc),
    call: createInProcessCaller(services, interceptors),
    logger,
    maxBodyBytes: options.maxBodyBytes,
    // A token without the route's scope hears 403 before its body is read or judged.
    beforeBody: (method, authorization) => {
      const verdict = checkRpc(checkAccess, method, authorization);
      return verdict.ok ? undefined : verdict;
    },
  });

  // Everything that is not an RPC: health, metrics, REST. Returns the route label for metrics.
  const serveHttp = async (req: NodeRequest, res: NodeResponse): Promise<string> => {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    if (await handleHealth(req, res)) return path;
    // The page holds no data: it loads without a token, and asks for one for its data calls.
    if (handleDashboard(req, res, path)) return path.startsWith("/dashboard/assets/") ? "/dashboard/assets/*" : "/dashboard";
    // Routes of the scope table need their scope; any other path (REST, 404) a known token first,
    // so that strangers learn nothing from its answer; REST routes then check their RPC's scope.
    const scope = scopeOfHttpPath(path);
    const verdict = checkAccess(req.headers.authorization, scope, `${req.method} ${excerpt(path)}`);
    if (!verdict.ok && (scope !== undefined || verdict.status === 401)) {
      sendRefusal(res, verdict);
      return verdict.status === 401 ? "unauthenticated" : "forbidden";
    }
    if (path === "/metrics" && req.method === "GET") {
      const body = await metrics.registry.metrics();
      res.writeHead(200, { "content-type": metrics.registry.contentType });
      res.end(body);
      return path;
    }
    if (apiDocs.handle(req, res, path)) return path.startsWith("/docs/") ? "/docs/*" : path;
    const route = await handleRest(req, res);
    if (route !== undefined) return route;
    sendJson(res, 404, { detail: `no route for ${req.method} ${path}` });
    return "unmatched";
  };

  const fallback = (req: NodeRequest, res: NodeResponse) => {
    const started = process.hrtime.bigint();
    serveHttp(req, res)
      .catch((err: unknown) => {
        logger.error({ err }, "request failed");
        sendJson(res, 500, { detail: "internal server error" });
        return "error";
      })
      .then((route) => {
        metrics.observeHttp(route, req.method ?? "GET", res.statusCode, Number(process.hrtime.bigint() - started) / 1e9);
      });
  };

  const rpcHandler = createRpcHandler({
    routes,
    fallback,
    interceptors: [metrics.rpcInterceptor, ...interceptors],
    readMaxBytes: options.maxBodyBytes,
    logger,
  });
  if (options.endpoints === undefined) return rpcHandler;

  // The endpoint proxy comes before the RPC and REST machinery: it streams bodies both ways and
  // pays for nothing it does not use (docs/endpoints.md, "Routing").
  const kept = options.endpointKept ?? new KeptBytes();
  const proxy = createEndpointProxy({
    directory: options.endpoints,
    maxBodyBytes: options.maxBodyBytes,
    firstByteMs: options.endpointFirstByteMs ?? ENDPOINT_PROXY_DEFAULTS.firstByteMs,
    holdMs: options.endpointHold?.ms ?? ENDPOINT_PROXY_DEFAULTS.holdMs,
    holdMax: options.endpointHold?.max ?? ENDPOINT_PROXY_DEFAULTS.holdMax,
    stallMs: options.endpointContinuation?.stallMs ?? ENDPOINT_PROXY_DEFAULTS.stallMs,
    resumeMax: options.endpointContinuation?.resumeMax ?? ENDPOINT_PROXY_DEFAULTS.resumeMax,
    prefixIndex: options.endpointPrefix,
    load: options.endpointLoad,
    kept,
    shutdown: options.shutdown,
    metrics: options.endpointTraffic ? withTraffic(createProxyMetrics(metrics.registry, kept), options.endpointTraffic) : createProxyMetrics(metrics.registry, kept),
    settle: settleStep(createKeyUsageMetrics(metrics.registry), options.endpointUsage),
    logger,
  });
  return (req, res) => {
    const url = req.url ?? "/";
    if (!url.startsWith(ENDPOINT_PREFIX)) return rpcHandler(req, res);
    const started = process.hrtime.bigint();
    res.once("close", () => {
      metrics.observeHttp(ENDPOINT_ROUTE, req.method ?? "GET", res.statusCode, Number(process.hrtime.bigint() - started) / 1e9);
    });
    // The scope table's entry for /endpoints/ (endpoints:invoke), as every plain HTTP route; a
    // key is also checked against the endpoint it calls.
    const pathOnly = url.split("?", 1)[0]!;
    const path = parseEndpointPath(url);
    const endpoint = path.kind === "ok" ? path.name : undefined;
    const verdict = checkAccess(req.headers.authorization, scopeOfHttpPath(pathOnly), `${req.method} ${excerpt(pathOnly)}`, endpoint);
    if (!verdict.ok) {
      sendRefusalBody(res, verdict.status, verdict.detail, verdict.status === 401 ? { "www-authenticate": "Bearer" } : {});
      return;
    }
    if (path.kind === "ok") {
      const allowance = verdict.key === undefined ? undefined : options.keyAdmission?.forRequest(verdict.key, path.name);
      proxy.handle(req, res, path.name, verdict.actor, path.upstreamPath, allowance);
    } else if (path.kind === "invalid") sendRefusalBody(res, 400, path.detail);
    else sendRefusalBody(res, 404, `no route for ${req.method} ${excerpt(pathOnly)}`, {}, { code: "no_route" });
  };
}

/** The proxy's settle step: each answer's end counted in the per-key metrics and this process's usage minutes. */
function settleStep(metrics: (answer: SettledAnswer) => void, usage: KeyUsage | undefined): (answer: SettledAnswer) => void {
  if (usage === undefined) return metrics;
  return (answer) => {
    metrics(answer);
    usage.settled(answer);
  };
}
