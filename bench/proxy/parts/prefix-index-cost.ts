// bench:proxy's measure of the prefix index (SPEC.md section 2, "Requests that share a prompt go
// where it is cached"): one proxy process with two endpoints over the same 4 replicas, one with
// `routing: prefix` (the index cuts and hashes every prompt, looks it up and learns it) and one
// with `routing: least_outstanding` (no index), under the same load in rounds of rotated order; the
// proxy's CPU per request of each, and their ratio (goal: at most 1.05). Two workloads of chats
// with a 4,000-character system prompt: 16 conversations, each request one of them at random (so
// the index sends each conversation to its replica and the load stays spread), and one prompt
// alone (every request to the one replica holding it until it is too busy: what the routing
// itself costs when it concentrates the load, beyond the index's work). The goal is judged on the
// first, with one-token answers: the least work a request gives the proxy besides the index, so
// the index's share is the largest. Beside it, for comparison, the same 16 conversations streamed
// (64-token answers, as the product's chats usually are), at a rate of their own.
//
// The index costs a few microseconds of a request's 120 to 150, less than the proxy's figure drifts on a shared
// machine from one round to the next: each round runs both endpoints back to back (in alternating
// order), at a fixed rate the proxy can keep (bench:proxy's BENCH_INDEX_RATE), and the verdict is
// the median of the rounds' ratios, their spread printed beside it. (Two proxy processes loaded at the same time are no fairer: the one with more work per
// request gets the same share of the CPU, so fewer requests, each with more of the process's fixed
// costs.) The proxy's own counter of prefix routing (gpu_endpoint_prefix_routed_total) shows how
// the index routed, and whether it ran at all.
import { fmt, signed, type Route, type Throughput } from "./http-timing.js";
import { measureIndexFloor } from "./index-floor-cost.js";
import type { Load } from "./load-process.js";
import { MODEL, spawnPart, targetOf, TOKEN, type Part } from "./processes.js";
import { measurePromptRead } from "./prompt-read-cost.js";
import { STREAM_TOKENS } from "./sse-replica.js";
import { mulberry32 } from "../../shared/random.js";
import { printTable, processCpuSeconds } from "../../shared/support.js";

const ENDPOINTS = { prefix: "with-index", least_outstanding: "without-index" } as const;
type Routing = keyof typeof ENDPOINTS;
/** The issue's goal: the proxy's CPU per request with the index at most this many times without it. */
const GOAL = 1.05;
const SYSTEM = `You are a support assistant for a shop; answer in two sentences. ${"Keep to the policy. ".repeat(196)}`;
/** A chat with `system` as its system prompt: a one-token answer, or a streamed one of STREAM_TOKENS. */
const chat = (system: string, streamed = false) =>
  JSON.stringify({ model: MODEL, messages: [{ role: "system", content: system }, { role: "user", content: "Where is my order?" }], ...(streamed ? { max_tokens: STREAM_TOKENS, stream: true } : { max_tokens: 1 }) });
const conversations = (streamed: boolean) => Array.from({ length: 16 }, (_, i) => chat(`Conversation ${i + 1}. ${SYSTEM}`, streamed));

interface Workload {
  name: string;
  /** One of them at random each request. */
  bodies: string | string[];
  /** Judged against the goal (else printed for comparison). */
  verdict: boolean;
  /** Streamed answers: run at IndexCostOptions.streamRate. */
  streamed: boolean;
}

const WORKLOADS: Workload[] = [
  { name: "16 conversations, one at random each request", bodies: conversations(false), verdict: true, streamed: false },
  { name: "one prompt, every request", bodies: chat(SYSTEM), verdict: false, streamed: false },
  { name: `16 conversations, streamed (${STREAM_TOKENS}-token answers)`, bodies: conversations(true), verdict: false, streamed: true },
];

type Run = Throughput & { cpuUs: number };

export interface IndexCostOptions {
  inFlight: number;
  durationS: number;
  rounds: number;
  /** Requests a second, at most; undefined: as many as the proxy answers. */
  rate?: number;
  /** The same for streamed answers, each a few times a one-token answer's work. */
  streamRate?: number;
  /** Only the workload judged against the goal. */
  targetOnly?: boolean;
}

export async function measureIndexCost(load: Load, replica: Part, options: IndexCostOptions): Promise<void> {
  const targets = Array.from({ length: 4 }, (_, i) => targetOf(replica, `gpu-bench-replica-${i + 1}`));
  const proxy = await spawnPart("proxy", [JSON.stringify({ [ENDPOINTS.prefix]: targets, [ENDPOINTS.least_outstanding]: targets }), JSON.stringify({ [ENDPOINTS.prefix]: "prefix", [ENDPOINTS.least_outstanding]: "least_outstanding" })]);
  try {
    const route = (routing: Routing): Route => ({ port: proxy.port, path: `/endpoints/${ENDPOINTS[routing]}/v1/chat/completions`, headers: { authorization: `Bearer ${TOKEN}` } });
    const cpu = () => processCpuSeconds(proxy.child.pid!);
    const order: Routing[] = ["prefix", "least_outstanding"];
    const perSecond = (rate: number | undefined) => (rate === undefined ? "as many as the proxy answers" : `${rate} requests a second`);
    console.log(`\nthe prefix index: one proxy process, endpoints '${ENDPOINTS.prefix}' (routing: prefix) and '${ENDPOINTS.least_outstanding}' (routing: least_outstanding) over the same 4 replicas, chat completions with a ${SYSTEM.length}-character system prompt, ${options.inFlight} in flight, ${options.rounds} rounds of ${options.durationS} s each`);
    for (const workload of WORKLOADS.filter((w) => w.verdict || !options.targetOnly)) {
      const rate = workload.streamed ? options.streamRate : options.rate;
      const routedBefore = await prefixRouted(proxy.port);
      for (const routing of order) await load.throughput(route(routing), workload.bodies, options.inFlight, options.durationS, rate);
      const runs: Record<Routing, Run[]> = { prefix: [], least_outstanding: [] };
      for (let round = 0; round < options.rounds; round++) {
        for (const routing of round % 2 === 0 ? order : [...order].reverse()) {
          const before = cpu();
          const run = await load.throughput(route(routing), workload.bodies, options.inFlight, options.durationS, rate);
          runs[routing].push({ ...run, cpuUs: ((cpu() - before) / Math.max(1, run.total)) * 1e6 });
        }
      }
      const mean = (routing: Routing, pick: (r: Run) => number) => runs[routing].reduce((sum, r) => sum + pick(r), 0) / runs[routing].length;
      const ratios = runs.prefix.map((run, round) => run.cpuUs / runs.least_outstanding[round]!.cpuUs).sort((a, b) => a - b);
      const routed = subtract(await prefixRouted(proxy.port), routedBefore);
      console.log(`\n${workload.name}, ${perSecond(rate)}\n`);
      printTable([
        ["", ...order],
        ["req/s", ...order.map((r) => fmt(mean(r, (x) => x.rps)))],
        ["CPU per request us, the proxy process", ...order.map((r) => fmt(mean(r, (x) => x.cpuUs)))],
        ["errors", ...order.map((r) => String(runs[r].reduce((sum, x) => sum + x.errors, 0)))],
      ]);
      const ratio = median(ratios);
      const total = Object.values(routed).reduce((sum, n) => sum + n, 0);
      if (total === 0) {
        console.log(`not measured (${ratio.toFixed(3)}x): the proxy counted no prefix routing (gpu_endpoint_prefix_routed_total), so the index did not run and both endpoints routed by least outstanding`);
        continue;
      }
      console.log(`routed by the index: ${Object.entries(routed).map(([outcome, n]) => `${outcome} ${((100 * n) / total).toFixed(1)}%`).join(", ")} of ${total}`);
      console.log(`rounds' ratios, lowest to highest: ${ratios.map((r) => r.toFixed(3)).join(", ")}; of the means: ${(mean("prefix", (x) => x.cpuUs) / mean("least_outstanding", (x) => x.cpuUs)).toFixed(3)}x`);
      const [low, high] = medianInterval(ratios);
      console.log(`${workload.verdict ? "target" : "for comparison"}: CPU per request with the prefix index <= ${GOAL}x without it (median of the rounds' ratios): ${ratio.toFixed(3)}x, 95% interval ${low.toFixed(3)} to ${high.toFixed(3)}${workload.verdict ? ` ${verdict(low, high)}` : ""}`);
    }
    console.log("\nthe index's work with cold caches (8 MiB written between two requests), in this process, and its floor: the least an exact index does (median of interleaved rounds)\n");
    const floor = measureIndexFloor(conversations(false));
    printTable([["", "us per request", "over the floor, us"], ...floor.map((c) => [c.label, c.us.toFixed(2), signed(c.us - floor[floor.length - 1]!.us)])]);
    console.log("\nreading a prompt's blocks from a body, in this process (median of interleaved rounds)\n");
    printTable([["", "body bytes", "us per KB"], ...measurePromptRead(MODEL, SYSTEM).map((c) => [c.label, String(c.bodyBytes), c.usPerKb.toFixed(2)])]);
  } finally {
    proxy.child.kill("SIGTERM");
  }
}

/** The requests the proxy says it routed by prefix on the 'with-index' endpoint, by outcome. */
async function prefixRouted(port: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  const routed: Record<string, number> = {};
  for (const line of text.split("\n")) {
    if (!line.startsWith("gpu_endpoint_prefix_routed_total{") || !line.includes(`endpoint="${ENDPOINTS.prefix}"`)) continue;
    routed[/outcome="([^"]+)"/.exec(line)![1]!] = Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return routed;
}

function subtract(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(after).map(([outcome, n]) => [outcome, n - (before[outcome] ?? 0)]));
}

/**
 * The median's 95% interval, by resampling the rounds (a seeded bootstrap): on a machine whose
 * rounds spread wider than the index's cost, one run's median can land either side of the goal.
 */
function medianInterval(ratios: readonly number[], resamples = 2000): [number, number] {
  const random = mulberry32(65);
  const medians = Array.from({ length: resamples }, () => median(Array.from(ratios, () => ratios[Math.floor(random() * ratios.length)]!).sort((a, b) => a - b))).sort((a, b) => a - b);
  return [medians[Math.floor(resamples * 0.025)]!, medians[Math.ceil(resamples * 0.975) - 1]!];
}

/** met only when the whole interval is within the goal, MISSED when all of it is past it. */
function verdict(low: number, high: number): string {
  if (high <= GOAL) return "met";
  if (low > GOAL) return "MISSED";
  return "not settled: the interval straddles the goal (more rounds: BENCH_INDEX_ROUNDS)";
}

function median(sorted: number[]): number {
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}
