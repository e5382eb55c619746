import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter, Interceptor, ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import { createAuthInterceptor, createTokenCheck, UNAUTHENTICATED_MESSAGE } from "./auth.js";
import { createErrorInterceptor } from "./error-interceptor.js";
import { createHealthHandler, type ReadinessChecks } from "./health.js";
import type { Metrics } from "./metrics.js";
import { createInProcessCaller } from "./rest/in-process-caller.js";
import { createRpcHandler } from "./rpc-handler.js";
import { createRestHandler, sendJson, type NodeRequest, type NodeResponse } from "./rest/rest-handler.js";

export interface ServiceRegistration {
  desc: DescService;
  /** The RPC implementations by local name, for the in-process REST caller. */
  impl: object;
  /** Registers the implementation on the Connect router, typed against its own descriptor. */
  route(router: ConnectRouter): void;
}

/** RPCs left out answer `unimplemented` (HTTP 501); the product's services implement every one. */
export function registration<T extends DescService>(desc: T, impl: Partial<ServiceImpl<T>>): ServiceRegistration {
  return { desc, impl, route: (router) => router.service(desc, impl) };
}

export interface AppOptions {
  services: readonly ServiceRegistration[];
  logger: Logger;
  authTokens: readonly string[];
  readiness: ReadinessChecks;
  maxBodyBytes: number;
  metrics: Metrics;
}

export type NodeHandler = (req: NodeRequest, res: NodeResponse) => void;

/**
 * One Node request handler for everything the port serves: Connect, gRPC and gRPC-Web through
 * the RPC handler (rpc-handler.ts), and, for anything it does not match, health checks, metrics
 * and the REST routes derived from the google.api.http annotations.
 */
export function createAppHandler(options: AppOptions): NodeHandler {
  const { services, logger, metrics } = options;
  const isAuthorized = createTokenCheck(options.authTokens);
  const interceptors: Interceptor[] = [createErrorInterceptor(logger), createAuthInterceptor(isAuthorized)];
  const routes = (router: ConnectRouter) => {
    for (const service of services) service.route(router);
  };
  const handleHealth = createHealthHandler(options.readiness);
  const handleRest = createRestHandler({
    services: services.map((s) => s.desc),
    call: createInProcessCaller(services, interceptors),
    logger,
    maxBodyBytes: options.maxBodyBytes,
  });

  // Everything that is not an RPC: health, metrics, REST. Returns the route label for metrics.
  const serveHttp = async (req: NodeRequest, res: NodeResponse): Promise<string> => {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    if (await handleHealth(req, res)) return path;
    if (!isAuthorized(req.headers.authorization)) {
      sendJson(res, 401, { detail: UNAUTHENTICATED_MESSAGE }, { "www-authenticate": "Bearer" });
      return "unauthenticated";
    }
    if (path === "/metrics" && req.method === "GET") {
      const body = await metrics.registry.metrics();
      res.writeHead(200, { "content-type": metrics.registry.contentType });
      res.end(body);
      return path;
    }
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

  return createRpcHandler({
    routes,
    fallback,
    interceptors: [metrics.rpcInterceptor, ...interceptors],
    readMaxBytes: options.maxBodyBytes,
    logger,
  });
}
