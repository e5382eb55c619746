import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createTemplatesOnlyHandler } from "../support/partial-app.js";

// Every RPC of the product is implemented; this checks the mechanism that answers an RPC whose
// implementation is left out (a service registered partially, as during a rollout).

let server: RunningServer;

beforeAll(async () => {
  const handler = createTemplatesOnlyHandler();
  server = await listen({ handler, host: "127.0.0.1", port: 0 });
});

afterAll(async () => {
  await server?.close(500);
});

describe("an RPC without an implementation", () => {
  it("answers 501 with a detail over REST, while implemented routes answer", async () => {
    expect((await fetch(`${server.url}/api/gpu/templates`)).status).toBe(200);
    const res = await fetch(`${server.url}/api/gpu/statistics`);
    expect(res.status).toBe(501);
    expect(await res.json()).toEqual({ detail: "gpu.v1.GpuService.GetStatistics is not implemented" });
  });

  it.each([
    ["Connect", () => createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" })],
    ["gRPC", () => createGrpcTransport({ baseUrl: server.url })],
  ])("answers unimplemented over %s", async (_name, transport) => {
    const err = await createClient(GpuService, transport()).getStatistics({}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unimplemented);
  });
});
