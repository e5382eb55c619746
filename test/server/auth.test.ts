import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";

const TOKEN = "s3cret-token-for-tests";
const OTHER_TOKEN = "second-valid-token";

let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    env: { AUTH_TOKENS: `${TOKEN},${OTHER_TOKEN}` },
  });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
});

const cases: Array<[string, Record<string, string>, number]> = [
  ["no token", {}, 401],
  ["a wrong token", { authorization: "Bearer nope" }, 401],
  ["a token that is a prefix of a right one", { authorization: `Bearer ${TOKEN.slice(0, -1)}` }, 401],
  ["a right token without the Bearer scheme", { authorization: TOKEN }, 401],
  ["the right token", { authorization: `Bearer ${TOKEN}` }, 200],
  ["the second configured token", { authorization: `bearer ${OTHER_TOKEN}` }, 200],
];

describe("bearer auth over REST", () => {
  it.each(cases)("answers %s with %i", async (_name, headers, status) => {
    const res = await fetch(`${server.url}/api/gpu/templates`, { headers });
    expect(res.status).toBe(status);
    if (status === 401) {
      expect(await res.json()).toEqual({ detail: "missing or invalid bearer token" });
      expect(res.headers.get("www-authenticate")).toBe("Bearer");
    }
  });

  it("checks the token before looking at the request, so bad input from strangers is a 401", async () => {
    const res = await fetch(`${server.url}/api/gpu/search-offers`, { method: "POST", body: "{bad" });
    expect(res.status).toBe(401);
  });

  it("leaves /healthz and /readyz open", async () => {
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
  });
});

const transports: Array<[string, (headers: Record<string, string>) => Transport]> = [
  ["Connect", (headers) => createConnectTransport({ baseUrl: server.url, httpVersion: "2", interceptors: [withHeaders(headers)] })],
  ["gRPC", (headers) => createGrpcTransport({ baseUrl: server.url, interceptors: [withHeaders(headers)] })],
  ["gRPC-Web", (headers) => createGrpcWebTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [withHeaders(headers)] })],
];

function withHeaders(headers: Record<string, string>): Interceptor {
  return (next) => async (req) => {
    for (const [name, value] of Object.entries(headers)) req.header.set(name, value);
    return next(req);
  };
}

describe.each(transports)("bearer auth over %s", (_name, transport) => {
  it.each(cases)("with %s", async (_case, headers, status) => {
    const client = createClient(GpuService, transport(headers));
    const result = await client.listTemplates({}).catch((e: unknown) => e);
    if (status === 200) {
      expect(result).not.toBeInstanceOf(Error);
    } else {
      expect(result).toBeInstanceOf(ConnectError);
      expect((result as ConnectError).code).toBe(Code.Unauthenticated);
    }
  });
});

describe("bearer auth with @grpc/grpc-js", () => {
  it("refuses a call without metadata and accepts one with the token", async () => {
    const root = join(import.meta.dirname, "../..");
    const definition = protoLoader.loadSync("gpu/v1/gpu_service.proto", {
      includeDirs: [join(root, "proto"), join(root, "node_modules/google-proto-files")],
      keepCase: true,
    });
    const proto = grpc.loadPackageDefinition(definition) as unknown as {
      gpu: { v1: { GpuService: grpc.ServiceClientConstructor } };
    };
    const client = new proto.gpu.v1.GpuService(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    const call = (metadata: grpc.Metadata) =>
      new Promise<unknown>((resolve) =>
        (client as unknown as Record<string, (r: object, m: grpc.Metadata, cb: (e: unknown, v: unknown) => void) => void>)
          .ListTemplates!({}, metadata, (err, value) => resolve(err ?? value)),
      );
    try {
      const refused = (await call(new grpc.Metadata())) as grpc.ServiceError;
      expect(refused.code).toBe(grpc.status.UNAUTHENTICATED);
      const metadata = new grpc.Metadata();
      metadata.set("authorization", `Bearer ${TOKEN}`);
      const accepted = (await call(metadata)) as { templates: unknown[] };
      expect(accepted.templates).toHaveLength(3);
    } finally {
      client.close();
    }
  });
});
