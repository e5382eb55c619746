import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { IndexingService } from "../../../gen/search/v1/indexing_service_pb.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { createTokenFile, type TestToken } from "../../support/token-file.js";

// Each scope against each route family, on REST and on Connect and gRPC: a token holding the
// family's scope gets past auth (the calls are chosen to fail cheaply after it: an unknown
// template, an invalid interval), any other token hears 403 / permission_denied naming the scope.

const SCOPES = ["gpu:read", "gpu:write", "endpoints:invoke", "indexing:read", "indexing:run", "ops:read"];
const TOKENS: TestToken[] = SCOPES.map((scope) => ({ name: scope.replace(":", "-"), secret: `secret-of-${scope}`, scopes: [scope] }));
const ALL: TestToken = { name: "admin", secret: "secret-of-admin", scopes: SCOPES };

let db: TestDatabase;
let server: TestServer;
let tokenFile: ReturnType<typeof createTokenFile>;

beforeAll(async () => {
  db = await createTestDatabase();
  tokenFile = createTokenFile([...TOKENS, ALL]);
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { AUTH_TOKENS_FILE: tokenFile.path } });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
  tokenFile?.remove();
});

const restFamilies: Array<[string, string, string, number]> = [
  ["gpu:read", "GET", "/api/gpu/templates", 200],
  ["gpu:read", "GET", "/api/gpu/statistics", 200],
  ["gpu:read", "GET", "/api/gpu/spend", 200],
  ["gpu:read", "GET", "/api/gpu/endpoints/none/history", 404],
  ["gpu:write", "POST", "/api/gpu/instances/from-template?template_name=nope", 400],
  ["gpu:write", "DELETE", "/api/gpu/instances/gpu-999999", 404],
  ["indexing:read", "GET", "/api/search/v1/index/db/goods/status", 200],
  ["indexing:run", "GET", "/api/search/v1/index/db/goods?interval=abc", 400],
  ["indexing:run", "POST", "/api/search/v1/batch/product?chunk_size=abc", 400],
  ["ops:read", "GET", "/metrics", 200],
  ["ops:read", "GET", "/openapi.json", 200],
  ["ops:read", "GET", "/docs", 200],
  // No endpoint routes yet: past auth, the path is simply unknown.
  ["endpoints:invoke", "GET", "/endpoints/chat/v1/models", 404],
];

describe.each(TOKENS)("REST with the $name token", (token) => {
  it.each(restFamilies)("needs %s for %s %s", async (scope, method, path, allowedStatus) => {
    const res = await fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${token.secret}` } });
    if (token.scopes.includes(scope)) {
      expect(res.status).toBe(allowedStatus);
    } else {
      expect(res.status).toBe(403);
      expect(((await res.json()) as { detail: string }).detail).toMatch(new RegExp(`^token '${token.name}' may not call .*: it needs scope ${scope}$`));
    }
  });
});

describe("REST refusals", () => {
  it("judges the scope before the body: a bad body from a token without the scope is a 403", async () => {
    const reader = TOKENS.find((t) => t.scopes[0] === "gpu:read")!;
    const res = await fetch(`${server.url}/api/gpu/instances`, { method: "POST", body: "{bad", headers: { authorization: `Bearer ${reader.secret}` } });
    expect(res.status).toBe(403);
  });

  it("still answers 401 to an unknown token, on every family", async () => {
    for (const [, method, path] of restFamilies) {
      const res = await fetch(`${server.url}${path}`, { method, headers: { authorization: "Bearer nobody" } });
      expect(res.status, `${method} ${path}`).toBe(401);
    }
  });

  it("leaves the health checks open", async () => {
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  it("lets a token with every scope through everywhere", async () => {
    for (const [, method, path, status] of restFamilies) {
      const res = await fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${ALL.secret}` } });
      expect(res.status, `${method} ${path}`).toBe(status);
    }
  });
});

function bearer(secret: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${secret}`);
    return next(req);
  };
}

type RpcCase = [string, string, (t: ReturnType<typeof clients>) => Promise<unknown>, Code | undefined];
const clients = (transport: ReturnType<typeof createConnectTransport>) => ({ gpu: createClient(GpuService, transport), indexing: createClient(IndexingService, transport) });

const rpcFamilies: RpcCase[] = [
  ["gpu:read", "ListTemplates", (c) => c.gpu.listTemplates({}), undefined],
  ["gpu:write", "CreateInstanceFromTemplate", (c) => c.gpu.createInstanceFromTemplate({ templateName: "nope" }), Code.InvalidArgument],
  ["gpu:write", "DestroyInstance", (c) => c.gpu.destroyInstance({ instanceId: "gpu-999999" }), Code.NotFound],
  ["indexing:read", "ListBatchLogs", (c) => c.indexing.listBatchLogs({}), undefined],
  ["indexing:run", "IndexGoods", (c) => c.indexing.indexGoods({ interval: "abc" }), Code.InvalidArgument],
];

const transports: Array<[string, (secret: string) => ReturnType<typeof createConnectTransport>]> = [
  ["Connect", (secret) => createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [bearer(secret)] })],
  ["gRPC", (secret) => createGrpcTransport({ baseUrl: server.url, interceptors: [bearer(secret)] })],
];

describe.each(transports)("%s", (_protocol, transport) => {
  it.each(TOKENS.map((t) => [t.name, t] as const))("checks each RPC family's scope for the %s token", async (_name, token) => {
    const c = clients(transport(token.secret));
    for (const [scope, rpc, call, allowedCode] of rpcFamilies) {
      const result = await call(c).then(
        () => undefined,
        (err: unknown) => ConnectError.from(err),
      );
      if (token.scopes.includes(scope)) {
        expect(result?.code, rpc).toBe(allowedCode);
      } else {
        expect(result?.code, rpc).toBe(Code.PermissionDenied);
        expect(result?.rawMessage, rpc).toMatch(new RegExp(`needs scope ${scope}$`));
      }
    }
  });
});
