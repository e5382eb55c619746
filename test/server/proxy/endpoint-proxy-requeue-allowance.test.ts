import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import pino from "pino";
import { Registry } from "prom-client";
import { afterAll, describe, expect, it } from "vitest";
import type { EndpointRoute, RouteTarget } from "../../../src/module.js";
import type { AnswerUsage } from "../../../src/server/proxy/answer-usage.js";
import type { CallerAllowance } from "../../../src/server/proxy/caller-allowance.js";
import { createEndpointProxy } from "../../../src/server/proxy/endpoint-proxy.js";
import { KeptBytes } from "../../../src/server/proxy/kept-body.js";
import { createProxyMetrics } from "../../../src/server/proxy/proxy-metrics.js";
import { createProxyLoad } from "../../../src/server/proxy/proxy-load.js";

// A request whose replica fails before any answer byte goes back to the hold queue while another
// replica is coming (hold-queue.ts, requeue): its caller's allowance goes with it, so that the
// answer that comes at last settles it once, and the key's place in flight is given back. Real
// sockets; the allowance records what it is told.

const servers: Server[] = [];

afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function listening(handler: Parameters<typeof createServer>[1]): Promise<Server> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push(server);
  return server;
}

const urlOf = (server: Server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

describe("a requeued request's allowance", () => {
  it("is settled once, when the replica that came answers it", async () => {
    // A replica listed as ready whose machine is gone: its port closed.
    const gone = await listening(() => undefined);
    const goneTarget: RouteTarget = { instanceId: "gpu-gone", url: urlOf(gone), apiKey: null };
    gone.closeAllConnections();
    await new Promise((resolve) => gone.close(resolve));
    servers.splice(servers.indexOf(gone), 1);
    const next = await listening((req, res) => {
      req.resume();
      req.once("end", () => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
    });

    let targets: RouteTarget[] = [goneTarget];
    const proxy = createEndpointProxy({
      directory: { route: async (): Promise<EndpointRoute> => ({ endpointId: "1", targets: [...targets], coming: true }) },
      maxBodyBytes: 1 << 20,
      firstByteMs: 5_000,
      metrics: createProxyMetrics(new Registry(), new KeptBytes()),
      logger: pino({ level: "silent" }),
      holdMs: 10_000,
      holdMax: 10,
      stallMs: 5_000,
      resumeMax: 1,
      load: createProxyLoad(),
    });
    const admitted: number[] = [];
    const settled: AnswerUsage[] = [];
    const allowance: CallerAllowance = {
      admit: async () => (admitted.push(1), undefined),
      headers: () => ({}),
      used: () => undefined,
      signal: new AbortController().signal,
      settle: (usage) => void settled.push(usage),
    };
    const front = await listening((req, res) => proxy.handle(req, res, "chat", "team-a", "/v1/models", allowance));

    const answer = fetch(`${urlOf(front)}/v1/models`);
    // Refused by the gone replica, the request waits; the next replica comes.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(settled).toEqual([]);
    targets = [goneTarget, { instanceId: "gpu-next", url: urlOf(next), apiKey: null }];
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.headers.get("x-endpoint-instance")).toBe("gpu-next");
    await res.arrayBuffer();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(settled).toHaveLength(1);
    expect(admitted.length).toBeGreaterThanOrEqual(1);
  });
});
