// The processes of the proxy benches (bench:endpoint, bench:proxy). The proxy, each replica and
// the load run in a process of their own, so that no part shares an event loop with another and
// each part's CPU can be read alone (/proc/<pid>/stat). This file is also their entry point:
// `--child <role> ...` starts one part, which prints one JSON line (its port) when it listens.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import type { RouteTarget } from "../src/module.js";

export const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";
export const TOKEN = "bench-token";
export const ONE_TOKEN = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Say hi" }], max_tokens: 1 });

export interface Part {
  child: ChildProcess;
  /** 0 for the load, which listens on none. */
  port: number;
  /** The next line the part prints (the load's answers). */
  nextLine(): Promise<string>;
}

type Role =
  /** A simulated model server (the one the simulated marketplace runs): instance, ms to first token. */
  | "model-server"
  /** The bench's minimal replica (sse-replica.ts). */
  | "sse-replica"
  /** The product's app handler over a fixed directory: a JSON map of endpoint names to replicas. */
  | "proxy"
  /** The load generator (load-process.ts): runs the jobs it reads on stdin. */
  | "load"
  /** A floor proxy (floor-proxies.ts): the kind, the replica's port. */
  | "floor";

const started = new Set<ChildProcess>();
// Whatever ends the bench (an error, Ctrl-C), no part outlives it.
process.once("exit", () => {
  for (const child of started) child.kill("SIGTERM");
});
process.once("SIGINT", () => process.exit(130));
process.once("SIGTERM", () => process.exit(143));

/** Starts one part; resolves once it listens. */
export async function spawnPart(role: Role, args: string[] = []): Promise<Part> {
  // BENCH_PROFILE=<dir> writes a CPU profile of the proxy process there (.cpuprofile, for Chrome's DevTools).
  const profile = role === "proxy" && process.env.BENCH_PROFILE ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_PROFILE] : [];
  const child = spawn(process.execPath, [...profile, "--import", "tsx", import.meta.filename, "--child", role, ...args], { stdio: ["pipe", "pipe", "inherit"] });
  started.add(child);
  child.once("exit", () => started.delete(child));
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const exited = new Promise<never>((_, reject) => child.once("exit", (code, signal) => reject(new Error(`bench part ${role} exited (${code ?? signal})`))));
  exited.catch(() => undefined);
  const nextLine = async () => {
    const next = await Promise.race([lines.next(), exited]);
    if (next.done) throw new Error(`bench part ${role} closed its output`);
    return next.value;
  };
  return { child, port: (JSON.parse(await nextLine()) as { port: number }).port, nextLine };
}

/** A replica part as a fixed directory lists it, under `instanceId`. */
export function targetOf(part: Part, instanceId: string): RouteTarget {
  return { instanceId, url: `http://127.0.0.1:${part.port}`, apiKey: null };
}

async function runPart(role: Role, args: string[]): Promise<void> {
  process.once("SIGTERM", () => process.exit(0));
  // Imported by role, so that a part loads only what it runs.
  if (role === "model-server") {
    const { startModelServer } = await import("../src/gpu/marketplace/simulated/model-server.js");
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
  await startProxy(JSON.parse(args[0]!) as Record<string, RouteTarget[]>);
}

async function startProxy(endpoints: Record<string, RouteTarget[]>): Promise<void> {
  // The service's code as `npm start` runs it: compiled by `npm run build` (bench:proxy and
  // bench:endpoint build first), not transformed on the fly as the bench's own TypeScript is.
  const built = <T>(path: string): Promise<T> => import(new URL(`../dist/${path}`, import.meta.url).href) as Promise<T>;
  const [{ default: pino }, { GpuService }, { listTemplates }, { createAppHandler }, { createTokenSource }, { listen }, { createMetrics }, { registration }, { createProxyLoad }, { createProxyTraffic }] = await Promise.all([
    import("pino"),
    built<typeof import("../gen/gpu/v1/gpu_service_pb.js")>("gen/gpu/v1/gpu_service_pb.js"),
    built<typeof import("../src/gpu/creation/templates.js")>("src/gpu/creation/templates.js"),
    built<typeof import("../src/server/app.js")>("src/server/app.js"),
    built<typeof import("../src/server/auth/token-source.js")>("src/server/auth/token-source.js"),
    built<typeof import("../src/server/listen.js")>("src/server/listen.js"),
    built<typeof import("../src/server/metrics.js")>("src/server/metrics.js"),
    built<typeof import("../src/server/service-registration.js")>("src/server/service-registration.js"),
    built<typeof import("../src/server/proxy/proxy-load.js")>("src/server/proxy/proxy-load.js"),
    built<typeof import("../src/server/proxy/proxy-traffic.js")>("src/server/proxy/proxy-traffic.js"),
  ]);
  const logger = pino({ level: "silent" });
  const handler = createAppHandler({
    services: [registration(GpuService, { listTemplates: () => ({ templates: [...listTemplates()] }) })],
    logger,
    tokens: createTokenSource({ envTokens: [TOKEN], file: undefined, logger }),
    readiness: {},
    maxBodyBytes: 1024 * 1024,
    metrics: createMetrics(),
    endpoints: { route: async (name) => (endpoints[name] ? { endpointId: name, targets: endpoints[name], coming: false } : undefined) },
    // What the service counts per request too: the load it publishes and the traffic of its history.
    endpointLoad: createProxyLoad(),
    endpointTraffic: createProxyTraffic(),
  });
  const server = await listen({ handler, host: "127.0.0.1", port: 0 });
  console.log(JSON.stringify({ port: server.port }));
}

const childAt = process.argv.indexOf("--child");
if (process.argv[1] === import.meta.filename && childAt >= 0) {
  runPart(process.argv[childAt + 1] as Role, process.argv.slice(childAt + 2)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
