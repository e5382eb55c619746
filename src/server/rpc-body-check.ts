import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { createAsyncIterable, encodeEnvelope, readAllBytes, type UniversalHandler } from "@connectrpc/connect/protocol";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";

// connect-es answers a unary request whose binary body does not parse with `internal`, and a
// body over the read limit may be left without an answer. Both are the caller's error: this reads
// the body of a unary binary request first (Connect, gRPC, gRPC-Web), and answers an oversized
// one `resource_exhausted` and a malformed one `invalid_argument`, each in its protocol's form.

type Protocol = "connect" | "grpc" | "grpc-web";
type UniversalRequest = Parameters<UniversalHandler>[0];
type UniversalResponse = Awaited<ReturnType<UniversalHandler>>;

const ENVELOPE_HEADER_BYTES = 5;

export function withBodyCheck(handler: UniversalHandler, readMaxBytes: number): UniversalHandler {
  const checked = async (req: UniversalRequest): Promise<UniversalResponse> => {
    const protocol = checkedProtocol(req);
    if (protocol === undefined || handler.method.methodKind !== "unary") return handler(req);
    const limit = protocol === "connect" ? readMaxBytes : readMaxBytes + ENVELOPE_HEADER_BYTES;
    let bytes: Uint8Array;
    try {
      bytes = await readAllBytes(req.body as AsyncIterable<Uint8Array>, limit, req.header.get("content-length"));
    } catch (err) {
      // Over the limit; anything else (the client left mid-upload) is the caller's to handle.
      if (!(err instanceof ConnectError)) throw err;
      return errorResponse(protocol, req, err);
    }
    const message = protocol === "connect" ? bytes : uncompressedMessage(bytes);
    if (message !== undefined) {
      try {
        fromBinary(handler.method.input, message);
      } catch (err) {
        return errorResponse(protocol, req, new ConnectError(`parse binary: ${(err as Error).message}`, Code.InvalidArgument));
      }
    }
    return handler({ ...req, body: createAsyncIterable([bytes]) });
  };
  return Object.assign(checked, handler);
}

/** The protocol of a POST with an uncompressed binary body, else undefined (left to connect-es). */
function checkedProtocol(req: UniversalRequest): Protocol | undefined {
  const isStream = typeof req.body === "object" && req.body !== null && Symbol.asyncIterator in req.body;
  if (req.method !== "POST" || !isStream) return undefined;
  const contentType = req.header.get("content-type");
  if (contentType === "application/proto") return req.header.get("content-encoding") ? undefined : "connect";
  if (contentType === "application/grpc" || contentType === "application/grpc+proto") return "grpc";
  if (contentType === "application/grpc-web" || contentType === "application/grpc-web+proto") return "grpc-web";
  return undefined;
}

/** The message of a single uncompressed envelope; undefined when it is compressed or incomplete. */
function uncompressedMessage(bytes: Uint8Array): Uint8Array | undefined {
  if (bytes.length < ENVELOPE_HEADER_BYTES || bytes[0] !== 0) return undefined;
  const length = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(1);
  if (bytes.length !== ENVELOPE_HEADER_BYTES + length) return undefined;
  return bytes.subarray(ENVELOPE_HEADER_BYTES);
}

function errorResponse(protocol: Protocol, req: UniversalRequest, error: ConnectError): UniversalResponse {
  if (protocol === "connect") {
    const body = JSON.stringify({ code: codeToString(error.code), message: error.rawMessage });
    return {
      status: error.code === Code.ResourceExhausted ? 429 : 400,
      header: new Headers({ "content-type": "application/json" }),
      body: createAsyncIterable([new TextEncoder().encode(body)]),
    };
  }
  const trailer = new Headers();
  setTrailerStatus(trailer, error);
  const header = new Headers({ "content-type": req.header.get("content-type") ?? `application/${protocol}` });
  if (protocol === "grpc") return { status: 200, header, trailer, body: createAsyncIterable([]) };
  return { status: 200, header, body: createAsyncIterable([encodeEnvelope(trailerFlag, trailerSerialize(trailer))]) };
}
