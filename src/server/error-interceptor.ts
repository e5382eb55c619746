import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import { databaseErrorText, isDatabaseUnavailable } from "../db/database-errors.js";
import {
  ConflictError,
  DomainError,
  InvalidInputError,
  NotFoundError,
  OperationFailedError,
  ResourceExhaustedError,
  UnavailableError,
} from "../errors.js";

type DomainErrorClass = abstract new (...args: never[]) => DomainError;

// By kind: an error takes the code of its nearest mapped class up its class chain, so that a
// subclass (MarketBlockedError, OutcomeUnknownError are kinds of UnavailableError) answers as its kind.
const codeOfDomainError = new Map<DomainErrorClass, Code>([
  [InvalidInputError, Code.InvalidArgument],
  [NotFoundError, Code.NotFound],
  [ConflictError, Code.Aborted],
  [ResourceExhaustedError, Code.ResourceExhausted],
  [UnavailableError, Code.Unavailable],
  [OperationFailedError, Code.Internal],
]);

/**
 * Maps domain errors to Connect codes, and anything unexpected to `internal` with a generic
 * message: the original error is logged with its cause, never sent to the client. Extra keys
 * of a domain error travel as a google.protobuf.Struct error detail, so that RPC clients and
 * the REST transcoder both see them.
 */
export function createErrorInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      throw toConnectError(err, logger, req.method.name);
    }
  };
}

export function toConnectError(err: unknown, logger: Logger, rpc: string): ConnectError {
  if (err instanceof ConnectError) {
    if (err.code === Code.Internal || err.code === Code.Unknown) {
      logger.error({ err, rpc }, "rpc failed");
    }
    return err;
  }
  if (err instanceof DomainError) {
    const code = codeOfKind(err);
    if (code === Code.Internal) logger.error({ err, rpc }, "rpc failed");
    // A dependency that is down is expected now and then: one line, no stack trace.
    if (code === Code.Unavailable) logger.warn({ rpc, reason: err.message }, "dependency unavailable");
    const details = err.extra
      ? [{ desc: StructSchema, value: fromJson(StructSchema, err.extra as JsonObject) }]
      : [];
    return new ConnectError(err.message, code, undefined, details, err);
  }
  if (isDatabaseUnavailable(err)) {
    // Expected while PostgreSQL restarts or refuses connections: one line, no stack, no SQL.
    logger.warn({ rpc, database: databaseErrorText(err) }, "database unavailable");
    return new ConnectError("the database is unavailable; try again shortly", Code.Unavailable);
  }
  if (isUnstorableTextError(err)) {
    return new ConnectError("the request contains text the database cannot store (such as a NUL character)", Code.InvalidArgument);
  }
  logger.error({ err, rpc }, "unexpected error");
  return new ConnectError("internal server error", Code.Internal);
}

function codeOfKind(err: DomainError): Code {
  for (let proto = Object.getPrototypeOf(err) as object | null; proto !== null; proto = Object.getPrototypeOf(proto) as object | null) {
    const code = codeOfDomainError.get(proto.constructor as DomainErrorClass);
    if (code !== undefined) return code;
  }
  return Code.Internal;
}

// PostgreSQL refuses NUL characters and invalid byte sequences in text (SQLSTATE 22021). Any
// such value came from the request, so it is the caller's error, wherever it reached the database.
function isUnstorableTextError(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === "22021";
}
