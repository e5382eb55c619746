import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { allowConnections, refuseConnections } from "../support/postgres.js";
import { useTestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";

// The database refuses connections and its backends are terminated (as during a restart or a
// failover): every protocol answers 503 `unavailable` with a short detail and no SQL, quickly,
// and the service recovers by itself once the database accepts connections again.

const t = useTestServer();
const DETAIL = "the database is unavailable; try again shortly";

const rpcTransports = [
  ["Connect", () => createConnectTransport({ baseUrl: t.server.url, httpVersion: "1.1" })],
  ["gRPC", () => createGrpcTransport({ baseUrl: t.server.url })],
  ["gRPC-Web", () => createGrpcWebTransport({ baseUrl: t.server.url, httpVersion: "1.1" })],
] as const;

describe("the database refusing and dropping connections", () => {
  it("is 503 unavailable on REST and every RPC protocol, fast, with no SQL, and recovers by itself", async () => {
    expect((await fetch(`${t.server.url}/api/gpu/instances`)).status).toBe(200);
    await refuseConnections(t.db);
    try {
      for (const path of ["/api/gpu/instances", "/api/gpu/statistics", "/api/gpu/instances/gpu-1/enhanced", "/api/gpu/instances/gpu-1/cost-analysis"]) {
        const started = Date.now();
        const res = await fetch(`${t.server.url}${path}`);
        expect(res.status, path).toBe(503);
        expect(await res.json()).toEqual({ detail: DETAIL });
        expect(Date.now() - started, path).toBeLessThan(2_000);
      }
      for (const [name, transport] of rpcTransports) {
        const err = await createClient(GpuService, transport())
          .listInstances({})
          .catch((e: unknown) => e);
        expect(err, name).toBeInstanceOf(ConnectError);
        expect((err as ConnectError).code, name).toBe(Code.Unavailable);
        expect((err as ConnectError).rawMessage, name).toBe(DETAIL);
      }
    } finally {
      await allowConnections(t.db);
    }
    const back = Date.now();
    await waitFor(async () => (await fetch(`${t.server.url}/api/gpu/instances`)).status === 200, "the GPU API to answer again", 2_000);
    expect(Date.now() - back).toBeLessThan(2_000);
  });
});
