// The processes of the proxy benches (bench:endpoint, bench:proxy). The proxy, each replica and
// the load run in a process of their own, so that no part shares an event loop with another and
// each part's CPU can be read alone (the scheduler's count, bench/shared/support.ts). This side starts them; what runs in each is
// process-main.ts (`--child <role> ...`), which prints one JSON line (its port) when it listens.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { RouteTarget } from "../../../src/module.js";

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

export type Role =
  /** A simulated model server (the one the simulated marketplace runs): instance, ms to first token. */
  | "model-server"
  /** The bench's minimal replica (sse-replica.ts). */
  | "sse-replica"
  /** The product's app handler over a fixed directory: a JSON map of endpoint names to replicas, and optionally one of names to their `routing`. */
  | "proxy"
  /** The load generator (load-process.ts): runs the jobs it reads on stdin. */
  | "load"
  /** A floor proxy (floor-proxies.ts): the kind, the replica's port. */
  | "floor";

/** What each part's process runs (imported by none of the bench's modules: no import circle). */
const PART_MAIN = fileURLToPath(new URL("./process-main.ts", import.meta.url));

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
  const child = spawn(process.execPath, [...profile, "--import", "tsx", PART_MAIN, "--child", role, ...args], { stdio: ["pipe", "pipe", "inherit"] });
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
