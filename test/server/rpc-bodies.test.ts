import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createTemplatesOnlyHandler } from "../support/partial-app.js";
import { createTokenFile } from "../support/token-file.js";

// Oversized and malformed binary bodies on every RPC protocol: always an answer, and the
// caller's error in its protocol's form (the handler's body limit here is 1024 bytes). With auth
// off, and on with an AUTH_TOKENS_FILE token.

const PATH = "/gpu.v1.GpuService/ListTemplates";
const MALFORMED = Uint8Array.from([0xff, 0xff, 0xff, 0xff, 0x0f]);
const OVERSIZED = new Uint8Array(4096).fill(0x0a);

let server: RunningServer;
/** Sent with every call of the current setup. */
let authHeader: Record<string, string> = {};
const tokenFile = createTokenFile([{ name: "bodies", secret: "bodies-secret", scopes: ["gpu:read"] }]);

afterAll(() => tokenFile.remove());

function envelope(message: Uint8Array): Uint8Array {
  const framed = new Uint8Array(5 + message.length);
  new DataView(framed.buffer).setUint32(1, message.length);
  framed.set(message, 5);
  return framed;
}

/** A gRPC call over HTTP/2 with a raw body; its HTTP status and grpc-status. */
async function grpcCall(body: Uint8Array): Promise<{ status: number; grpcStatus: string | undefined }> {
  const session = http2.connect(server.url);
  try {
    const stream = session.request({ ":method": "POST", ":path": PATH, "content-type": "application/grpc", te: "trailers", ...authHeader });
    let status = 0;
    let grpcStatus: string | undefined;
    stream.on("response", (headers) => {
      status = headers[":status"] ?? 0;
      grpcStatus ??= headers["grpc-status"] as string | undefined;
    });
    stream.on("trailers", (trailers) => (grpcStatus = trailers["grpc-status"] as string | undefined));
    stream.end(body);
    stream.resume();
    await new Promise((resolve) => stream.once("close", resolve));
    return { status, grpcStatus };
  } finally {
    session.close();
  }
}

/** A gRPC-Web call with a raw body; the grpc-status from the headers or the trailer frame. */
async function grpcWebCall(body: Uint8Array): Promise<string | undefined> {
  const res = await fetch(`${server.url}${PATH}`, { method: "POST", headers: { "content-type": "application/grpc-web+proto", ...authHeader }, body });
  expect(res.status).toBe(200);
  const bytes = new Uint8Array(await res.arrayBuffer());
  return res.headers.get("grpc-status") ?? /grpc-status: ?(\d+)/.exec(new TextDecoder().decode(bytes))?.[1];
}

describe.each([
  ["auth off", undefined, {}],
  ["an AUTH_TOKENS_FILE token", tokenFile.path, { authorization: "Bearer bodies-secret" }],
] as const)("binary RPC bodies, %s", (_setup, file, header) => {
  beforeAll(async () => {
    authHeader = { ...header };
    server = await listen({ handler: createTemplatesOnlyHandler(undefined, file), host: "127.0.0.1", port: 0 });
  });

  afterAll(async () => {
    await server?.close(500);
  });

  it("answers an oversized Connect body 429 resource_exhausted", async () => {
    const res = await fetch(`${server.url}${PATH}`, { method: "POST", headers: { "content-type": "application/proto", ...authHeader }, body: OVERSIZED });
    expect(res.status).toBe(429);
    expect(await res.json()).toMatchObject({ code: "resource_exhausted" });
  });

  it("answers malformed protobuf over gRPC with INVALID_ARGUMENT (3)", async () => {
    expect(await grpcCall(envelope(MALFORMED))).toEqual({ status: 200, grpcStatus: "3" });
  });

  it("answers an oversized gRPC message with RESOURCE_EXHAUSTED (8)", async () => {
    expect(await grpcCall(envelope(OVERSIZED))).toEqual({ status: 200, grpcStatus: "8" });
  });

  it("answers malformed protobuf over gRPC-Web with INVALID_ARGUMENT (3)", async () => {
    expect(await grpcWebCall(envelope(MALFORMED))).toBe("3");
  });

  it("answers an oversized gRPC-Web message with RESOURCE_EXHAUSTED (8)", async () => {
    expect(await grpcWebCall(envelope(OVERSIZED))).toBe("8");
  });

  it("still serves a well-formed gRPC call", async () => {
    expect(await grpcCall(envelope(new Uint8Array()))).toEqual({ status: 200, grpcStatus: "0" });
  });
});
