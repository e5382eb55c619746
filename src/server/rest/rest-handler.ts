import { fromJson, toJson, type DescMethodUnary, type DescService, type JsonValue } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { InvalidInputError } from "../../errors.js";
import { sendJson, type NodeRequest, type NodeResponse } from "../node-http.js";
import { CLIENT_LEFT_MESSAGE, clientLeft } from "../client-gone.js";
import { matchRoute, restRoutesOf } from "./http-rules.js";
import type { UnaryCaller } from "./in-process-caller.js";
import { requestJsonOf } from "./request-json.js";


export interface RestHandlerOptions {
  services: readonly DescService[];
  /** Calls the RPC through the same interceptors as the Connect handler. */
  call: UnaryCaller;
  logger: Logger;
  maxBodyBytes: number;
  /** Refuses a call before its body is read (auth: a missing scope), or lets it through. */
  beforeBody?: (method: DescMethodUnary, authorization: string | undefined) => { status: number; detail: string } | undefined;
}

/** Headers that REST callers may pass on to the RPC layer. */
const FORWARDED_HEADERS = ["authorization", "x-request-id"];

const HTTP_STATUS_OF_CODE: Record<Code, number> = {
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
};

export function httpStatusOf(code: Code): number {
  return HTTP_STATUS_OF_CODE[code] ?? 500;
}

/**
 * JSON over HTTP for every RPC that carries a google.api.http annotation. Resolves to the route
 * pattern that answered (a bounded label for metrics), or undefined when no route has the
 * request's path, so the caller can answer 404.
 */
export function createRestHandler(options: RestHandlerOptions) {
  const { call, logger, maxBodyBytes } = options;
  const routes = restRoutesOf(options.services);

  return async function handleRest(req: NodeRequest, res: NodeResponse): Promise<string | undefined> {
    const url = new URL(req.url ?? "/", "http://localhost");
    const { match, allowed } = matchRoute(routes, req.method ?? "GET", url.pathname);
    if (!match) {
      if (allowed.length === 0) return undefined;
      sendJson(res, 405, { detail: `method ${req.method} not allowed on ${url.pathname}` }, { allow: allowed.join(", ") });
      return "method_not_allowed";
    }
    const { method } = match.route;
    const refusal = options.beforeBody?.(method, req.headers.authorization);
    if (refusal) {
      sendJson(res, refusal.status, { detail: refusal.detail });
      return match.route.pattern;
    }
    try {
      const body = match.route.body === "" ? undefined : await readJsonBody(req, maxBodyBytes);
      const input = parseInput(method.input, requestJsonOf(match, url.searchParams, body));
      const abort = new AbortController();
      // Only a client that goes away before its answer aborts the call (aborting builds an error).
      res.once("close", () => {
        if (!res.writableFinished) abort.abort();
      });
      const output = await call(method, input, forwardedHeaders(req), abort.signal);
      sendJson(res, 200, toJson(method.output, output, { useProtoFieldName: true, alwaysEmitImplicit: true }));
    } catch (err) {
      if (clientLeft(req, err)) {
        logger.info({ route: match.route.pattern }, CLIENT_LEFT_MESSAGE);
        return "client_left";
      }
      sendError(res, err, logger);
    }
    return match.route.pattern;
  };
}

function parseInput(schema: Parameters<typeof fromJson>[0], json: JsonValue) {
  try {
    return fromJson(schema, json, { ignoreUnknownFields: false });
  } catch (err) {
    throw new InvalidInputError(`invalid request: ${(err as Error).message}`);
  }
}

function forwardedHeaders(req: NodeRequest): Headers {
  const headers = new Headers();
  for (const name of FORWARDED_HEADERS) {
    const value = req.headers[name];
    if (typeof value === "string") headers.set(name, value);
  }
  return headers;
}

class PayloadTooLargeError extends Error {}

async function readJsonBody(req: NodeRequest, maxBytes: number): Promise<JsonValue | undefined> {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > maxBytes) throw new PayloadTooLargeError(`request body exceeds ${maxBytes} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) throw new PayloadTooLargeError(`request body exceeds ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new InvalidInputError(`malformed JSON body: ${(err as Error).message}`);
  }
}

function sendError(res: NodeResponse, err: unknown, logger: Logger): void {
  if (err instanceof PayloadTooLargeError) {
    sendJson(res, 413, { detail: err.message });
    return;
  }
  if (err instanceof InvalidInputError) {
    sendJson(res, 400, { ...err.extra, detail: err.message });
    return;
  }
  if (err instanceof ConnectError) {
    const extra = err.findDetails(StructSchema)[0];
    const extraJson = extra ? (toJson(StructSchema, extra) as Record<string, JsonValue>) : {};
    sendJson(res, httpStatusOf(err.code), { ...extraJson, detail: err.rawMessage });
    return;
  }
  logger.error({ err }, "REST request failed");
  sendJson(res, 500, { detail: "internal server error" });
}
