// What runs in each process of the proxy benches (processes.ts starts them): `--child <role> ...`
// starts one part, which prints one JSON line (its port) when it listens.
import type { RouteTarget } from "../../../src/module.js";
import { MODEL, TOKEN, type Role } from "./processes.js";

async function runPart(role: Role, args: string[]): Promise<void> {
  process.once("SIGTERM", () => process.exit(0));
  // Imported by role, so that a part loads only what it runs.
  if (role === "model-server") {
    const { startModelServer } = await import("../../../src/gpu/marketplace/simulated/model-server.js");
    const server = await startModelServer({ model: MODEL, host: "127.0.0.1", instance: args[0], firstTokenMs: Number(args[1]) });
    return console.log(JSON.stringify({ port: server.port }));
  }
  if (role === "sse-replica") {
    const { startSseReplica } = await import("./sse-replica.js");
    return console.log(JSON.stringify({ port: await startSseReplica() }));
  }
  if (role === "floor") {
    const { startFloorProxy } = await import("./floor-proxies.js");
    return console.log(JSON.stringify({ port: await startFloorProxy(args[0] as "node-http" | "undici", Number(args[1])) }));
  }
  if (role === "load") {
    const { serveLoadJobs } = await import("./load-process.js");
    return serveLoadJobs();
  }
  await startProxy(JSON.parse(args[0]!) as Record<string, RouteTarget[]>, JSON.parse(args[1] ?? "{}") as Record<string, EndpointRouting>);
}

/** An endpoint's `routing`; an endpoint not named in the proxy's second argument gets none (the proxy's own default). */
type EndpointRouting = "prefix" | "least_outstanding";

async function startProxy(endpoints: Record<string, RouteTarget[]>, routings: Record<string, EndpointRouting>): Promise<void> {
  // The service's code as `npm start` runs it: compiled by `npm run build` (bench:proxy and
  // bench:endpoint build first), not transformed on the fly as the bench's own TypeScript is.
  const built = <T>(path: string): Promise<T> => import(new URL(`../../../dist/${path}`, import.meta.url).href) as Promise<T>;
  const [{ default: pino }, { GpuService }, { listTemplates }, { createAppHandler }, { createTokenSource }, { listen }, { createMetrics }, { registration }, { createProxyLoad }, { createProxyTraffic }] = await Promise.all([
    import("pino"),
    built<typeof import("../../../gen/gpu/v1/gpu_service_pb.js")>("gen/gpu/v1/gpu_service_pb.js"),
    built<typeof import("../../../src/gpu/creation/templates.js")>("src/gpu/creation/templates.js"),
    built<typeof import("../../../src/server/app.js")>("src/server/app.js"),
    built<typeof import("../../../src/server/auth/token-source.js")>("src/server/auth/token-source.js"),
    built<typeof import("../../../src/server/listen.js")>("src/server/listen.js"),
    built<typeof import("../../../src/server/metrics.js")>("src/server/metrics.js"),
    built<typeof import("../../../src/server/service-registration.js")>("src/server/service-registration.js"),
    built<typeof import("../../../src/server/proxy/proxy-load.js")>("src/server/proxy/proxy-load.js"),
    built<typeof import("../../../src/server/proxy/proxy-traffic.js")>("src/server/proxy/proxy-traffic.js"),
  ]);
  const logger = pino({ level: "silent" });
  const handler = createAppHandler({
    services: [registration(GpuService, { listTemplates: () => ({ templates: [...listTemplates()] }) })],
    logger,
    tokens: createTokenSource({ envTokens: [TOKEN], file: undefined, logger }),
    readiness: {},
    maxBodyBytes: 1024 * 1024,
    metrics: createMetrics(),
    endpoints: {
      route: async (name) => {
        if (!endpoints[name]) return undefined;
        // An endpoint's `routing` rides on the directory's answer (EndpointRoute), where the proxy reads it.
        const route = { endpointId: name, targets: endpoints[name], coming: false, ...(routings[name] ? { routing: routings[name] } : {}) };
        return route;
      },
    },
    // What the service counts per request too: the load it publishes and the traffic of its history.
    endpointLoad: createProxyLoad(),
    endpointTraffic: createProxyTraffic(),
  });
  const server = await listen({ handler, host: "127.0.0.1", port: 0 });
  console.log(JSON.stringify({ port: server.port }));
}

const childAt = process.argv.indexOf("--child");
if (childAt >= 0) {
  runPart(process.argv[childAt + 1] as Role, process.argv.slice(childAt + 2)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
