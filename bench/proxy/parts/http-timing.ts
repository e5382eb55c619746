// Timing HTTP calls on loopback, shared by the proxy benches (bench:endpoint, bench:proxy): a run
// of autocannon at N in flight, and single calls timed to their first byte and their end.
import { Agent, request } from "node:http";
import autocannon from "autocannon";

/** Where a call goes: a loopback port, a path, the headers it carries (a proxy's token). */
export interface Route {
  port: number;
  path: string;
  headers: Record<string, string>;
}

export interface Throughput {
  rps: number;
  /** Latency at that load, ms (autocannon's histogram: whole milliseconds). */
  p50: number;
  p99: number;
  errors: number;
  total: number;
}

/** POSTs `body` to `route` with `connections` in flight for `durationS` seconds; with `rate`, at most that many requests a second in all. */
/** `body`, or one of `body`'s picked at random for each request. */
export async function throughput(route: Route, body: string | string[], connections: number, durationS: number, rate?: number): Promise<Throughput> {
  // autocannon calls a request's setupRequest before each send (its types leave it out).
  const setupRequest = (bodies: string[]) => (request: object) => ({ ...request, body: bodies[Math.floor(Math.random() * bodies.length)] });
  const pick = (bodies: string[]) => ({ requests: [{ method: "POST", path: route.path, setupRequest: setupRequest(bodies) } as { method: string; path: string }] });
  const result = await autocannon({
    url: `http://127.0.0.1:${route.port}${route.path}`,
    method: "POST",
    ...(typeof body === "string" ? { body } : pick(body)),
    headers: { "content-type": "application/json", ...route.headers },
    connections,
    duration: durationS,
    // A worker thread cannot be handed setupRequest (a function): bodies picked at random run on this thread.
    ...(typeof body === "string" ? { workers: 1 } : {}),
    ...(rate === undefined ? {} : { overallRate: rate }),
  });
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, errors: result.errors + result.non2xx, total: result.requests.total };
}

export interface TimedCall {
  /** Microseconds to the first body byte and to the end. */
  firstUs: number;
  endUs: number;
  status: number;
  text: string;
}

/** One POST of `body`, timed. */
export function timedCall(agent: Agent, route: Route, body: string): Promise<TimedCall> {
  const started = process.hrtime.bigint();
  const us = () => Number(process.hrtime.bigint() - started) / 1000;
  return new Promise((resolve, reject) => {
    const req = request({ agent, host: "127.0.0.1", port: route.port, path: route.path, method: "POST", headers: { "content-type": "application/json", ...route.headers } }, (res) => {
      let firstUs = 0;
      let text = "";
      res.on("data", (chunk: Buffer) => {
        if (firstUs === 0) firstUs = us();
        text += chunk.toString();
      });
      res.once("end", () => resolve({ firstUs, endUs: us(), status: res.statusCode!, text }));
      res.once("error", reject);
    });
    req.once("error", reject);
    req.end(body);
  });
}

/** `n` calls one at a time on each route in turn (route 1, route 2, ..., route 1, ...); the percentiles of each, in microseconds. */
export async function alternateCalls(routes: Route[], body: string, n: number, pick: (t: TimedCall) => number): Promise<Array<{ p50: number; p99: number }>> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const times = routes.map(() => [] as number[]);
  for (let i = 0; i < n; i++) {
    for (const [at, route] of routes.entries()) {
      const answer = await timedCall(agent, route, body);
      if (answer.status !== 200) throw new Error(`port ${route.port} ${route.path} answered ${answer.status}: ${answer.text.slice(0, 200)}`);
      times[at]!.push(pick(answer));
    }
  }
  agent.destroy();
  return times.map(percentiles);
}

export function percentiles(values: number[]): { p50: number; p99: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { p50: at(0.5), p99: at(0.99) };
}

/** One streamed call on `route` must come back whole (200, ending in [DONE]) before it is measured. */
export async function checkStream(route: Route, body: string): Promise<void> {
  const agent = new Agent({ keepAlive: false });
  const answer = await timedCall(agent, route, body);
  agent.destroy();
  if (answer.status !== 200 || !answer.text.endsWith("data: [DONE]\n\n")) {
    throw new Error(`port ${route.port} ${route.path} did not stream a whole answer (${answer.status}): ${answer.text.slice(0, 300)}`);
  }
}

/** A figure as the benches print it: whole above 100, one decimal below. */
export function fmt(value: number): string {
  return Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(1);
}

/** A difference, with its sign. */
export function signed(value: number): string {
  return value < 0 ? `-${fmt(-value)}` : `+${fmt(value)}`;
}
