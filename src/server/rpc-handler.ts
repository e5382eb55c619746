import { Code, ConnectError, createConnectRouter, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { Logger } from "pino";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { CLIENT_LEFT_MESSAGE, clientLeft } from "./client-gone.js";
import { withBodyCheck } from "./rpc-body-check.js";

export interface RpcHandlerOptions {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  /** Requests that are not RPCs. */
  fallback: (req: NodeRequest, res: NodeResponse) => void;
  readMaxBytes: number;
  logger: Logger;
}

/**
 * Connect, gRPC and gRPC-Web for every registered service: connectNodeAdapter's job, plus one
 * correction: unary binary bodies are read and checked first (rpc-body-check.ts), so that an
 * oversized one is answered `resource_exhausted` and a malformed one `invalid_argument`.
 */
export function createRpcHandler(options: RpcHandlerOptions): (req: NodeRequest, res: NodeResponse) => void {
  const { fallback, logger, readMaxBytes } = options;
  const router = createConnectRouter({
    interceptors: options.interceptors,
    acceptCompression: [compressionGzip, compressionBrotli],
    readMaxBytes,
  });
  options.routes(router);
  const handlers = new Map(router.handlers.map((h) => [h.requestPath, withBodyCheck(h, readMaxBytes)]));

  return (req, res) => {
    const handler = handlers.get((req.url ?? "").split("?", 2)[0] ?? "");
    if (!handler) {
      fallback(req, res);
      return;
    }
    handler(universalRequestFromNodeRequest(req, res, undefined, undefined))
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((err: unknown) => {
        if (clientLeft(req, err) || ConnectError.from(err).code === Code.Aborted) {
          logger.info({ rpc: handler.method.name }, CLIENT_LEFT_MESSAGE);
          return;
        }
        logger.error({ err, rpc: handler.method.name }, "rpc handler failed");
      });
  };
}
