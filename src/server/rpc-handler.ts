import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createConnectRouter, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { createAsyncIterable, readAllBytes, type UniversalHandler } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { Logger } from "pino";
import type { NodeRequest, NodeResponse } from "./rest/rest-handler.js";

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
 * correction. connect-es answers a Connect-protocol request whose binary body does not parse
 * with `internal` (HTTP 500); a malformed request is the caller's error, so such bodies are
 * checked first and answered `invalid_argument` (HTTP 400), as connect-go does.
 */
export function createRpcHandler(options: RpcHandlerOptions): (req: NodeRequest, res: NodeResponse) => void {
  const { fallback, logger, readMaxBytes } = options;
  const router = createConnectRouter({
    interceptors: options.interceptors,
    acceptCompression: [compressionGzip, compressionBrotli],
    readMaxBytes,
  });
  options.routes(router);
  const handlers = new Map(router.handlers.map((h) => [h.requestPath, rejectMalformedBinary(h, readMaxBytes)]));

  return (req, res) => {
    const handler = handlers.get((req.url ?? "").split("?", 2)[0] ?? "");
    if (!handler) {
      fallback(req, res);
      return;
    }
    handler(universalRequestFromNodeRequest(req, res, undefined, undefined))
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((err: unknown) => {
        if (ConnectError.from(err).code === Code.Aborted) return;
        logger.error({ err, rpc: handler.method.name }, "rpc handler failed");
      });
  };
}

function rejectMalformedBinary(handler: UniversalHandler, readMaxBytes: number): UniversalHandler {
  const checked = async (req: Parameters<UniversalHandler>[0]) => {
    const isConnectBinary =
      req.method === "POST" &&
      req.header.get("content-type") === "application/proto" &&
      !req.header.get("content-encoding") &&
      typeof req.body === "object" &&
      req.body !== null &&
      Symbol.asyncIterator in req.body;
    if (!isConnectBinary) return handler(req);
    const bytes = await readAllBytes(req.body as AsyncIterable<Uint8Array>, readMaxBytes, req.header.get("content-length"));
    try {
      fromBinary(handler.method.input, bytes);
    } catch (err) {
      const body = JSON.stringify({ code: "invalid_argument", message: `parse binary: ${(err as Error).message}` });
      return {
        status: 400,
        header: new Headers({ "content-type": "application/json" }),
        body: createAsyncIterable([new TextEncoder().encode(body)]),
      };
    }
    return handler({ ...req, body: createAsyncIterable([bytes]) });
  };
  return Object.assign(checked, handler);
}
