import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { useTestServer } from "../support/server.js";

const t = useTestServer();

const transports: Array<[string, () => Transport]> = [
  ["Connect over HTTP/1.1", () => createConnectTransport({ baseUrl: t.server.url, httpVersion: "1.1" })],
  ["Connect over HTTP/2", () => createConnectTransport({ baseUrl: t.server.url, httpVersion: "2" })],
  ["Connect binary over HTTP/2", () => createConnectTransport({ baseUrl: t.server.url, httpVersion: "2", useBinaryFormat: true })],
  ["gRPC", () => createGrpcTransport({ baseUrl: t.server.url })],
  ["gRPC-Web", () => createGrpcWebTransport({ baseUrl: t.server.url, httpVersion: "1.1" })],
];

describe.each(transports)("GpuService templates with the generated client, %s", (_name, transport) => {
  it("lists the templates", async () => {
    const client = createClient(GpuService, transport());
    const res = await client.listTemplates({});
    expect(res.templates.map((t) => [t.name, t.config?.maxPrice, t.config?.minGpuRam])).toEqual([
      ["high_performance", 2, 24],
      ["budget", 0.5, 8],
      ["research", 1, 16],
    ]);
  });

  it("gets one template and answers not_found for an unknown one", async () => {
    const client = createClient(GpuService, transport());
    expect((await client.getTemplate({ templateName: "budget" })).config?.llmModelName).toBe("Qwen/Qwen2.5-Coder-7B-Instruct");
    const err = await client.getTemplate({ templateName: "nope" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.NotFound);
    expect((err as ConnectError).rawMessage).toBe("Template 'nope' not found");
  });
});

describe("malformed RPC bodies", () => {
  it("answers a Connect binary body that does not parse with 400 invalid_argument, not 500", async () => {
    const res = await fetch(`${t.server.url}/gpu.v1.GpuService/GetTemplate`, {
      method: "POST",
      headers: { "content-type": "application/proto" },
      body: new Uint8Array([0x0a, 0xff, 0xff]),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "invalid_argument", message: expect.stringMatching(/^parse binary/) });
  });

  it("answers malformed Connect JSON with 400 invalid_argument", async () => {
    const res = await fetch(`${t.server.url}/gpu.v1.GpuService/GetTemplate`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{nope",
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "invalid_argument" });
  });
});

describe("an independent gRPC implementation (@grpc/grpc-js loading the .proto files)", () => {
  const root = join(import.meta.dirname, "../..");

  function loadGpuService() {
    const definition = protoLoader.loadSync("gpu/v1/gpu_service.proto", {
      includeDirs: [join(root, "proto"), join(root, "node_modules/google-proto-files")],
      keepCase: true,
      defaults: true,
    });
    const proto = grpc.loadPackageDefinition(definition) as unknown as {
      gpu: { v1: { GpuService: grpc.ServiceClientConstructor } };
    };
    return new proto.gpu.v1.GpuService(`127.0.0.1:${t.server.port}`, grpc.credentials.createInsecure());
  }

  function call<T>(client: grpc.Client, method: string, request: object): Promise<T> {
    return new Promise((resolve, reject) => {
      (client as unknown as Record<string, (r: object, cb: (e: grpc.ServiceError | null, v: T) => void) => void>)[method]!(
        request,
        (err, value) => (err ? reject(err) : resolve(value)),
      );
    });
  }

  it("gets a template and a NOT_FOUND status on the same port", async () => {
    const client = loadGpuService();
    try {
      const template = await call<{ name: string; config: { llm_model_name: string } }>(client, "GetTemplate", {
        template_name: "high_performance",
      });
      expect(template.name).toBe("high_performance");
      expect(template.config.llm_model_name).toBe("Qwen/Qwen2.5-Coder-32B-Instruct");
      const err = await call(client, "GetTemplate", { template_name: "nope" }).catch((e: grpc.ServiceError) => e);
      expect((err as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND);
      expect((err as grpc.ServiceError).details).toBe("Template 'nope' not found");
    } finally {
      client.close();
    }
  });
});
