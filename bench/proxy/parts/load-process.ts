// The load generator in a process of its own (processes.ts, role "load"): the bench sends it one job a
// line on stdin and reads one answer a line on stdout, so that the load's CPU is never the
// proxy's, nor its event loop the bench's.
import { createInterface } from "node:readline";
import { alternateCalls, throughput, type Route, type Throughput } from "./http-timing.js";
import { spawnPart, type Part } from "./processes.js";

type Job =
  | { kind: "throughput"; route: Route; body: string | string[]; connections: number; durationS: number; rate?: number }
  | { kind: "alternate"; routes: Route[]; body: string; n: number; pick: "first" | "end" };

export interface Load {
  /** autocannon at `connections` in flight for `durationS` seconds (`body` an array: one of them at random each request); with `rate`, at most that many requests a second. */
  throughput(route: Route, body: string | string[], connections: number, durationS: number, rate?: number): Promise<Throughput>;
  /** `n` calls one at a time on each route in turn: p50 / p99 µs to the first byte or to the end, per route. */
  alternate(routes: Route[], body: string, n: number, pick: "first" | "end"): Promise<Array<{ p50: number; p99: number }>>;
}

export async function startLoad(): Promise<Load & { part: Part }> {
  const part = await spawnPart("load");
  // One job at a time: the answers come back in order.
  let queue = Promise.resolve<unknown>(undefined);
  const run = <T>(job: Job): Promise<T> => {
    const next = queue.then(async () => {
      part.child.stdin!.write(`${JSON.stringify(job)}\n`);
      const answer = JSON.parse(await part.nextLine()) as { ok: T } | { error: string };
      if ("error" in answer) throw new Error(`load: ${answer.error}`);
      return answer.ok;
    });
    queue = next.catch(() => undefined);
    return next;
  };
  return {
    part,
    throughput: (route, body, connections, durationS, rate) => run({ kind: "throughput", route, body, connections, durationS, rate }),
    alternate: (routes, body, n, pick) => run({ kind: "alternate", routes, body, n, pick }),
  };
}

/** The load process's side: runs each job it reads, answers with its result or its error. */
export async function serveLoadJobs(): Promise<void> {
  console.log(JSON.stringify({ port: 0 }));
  for await (const line of createInterface({ input: process.stdin })) {
    const job = JSON.parse(line) as Job;
    try {
      const ok =
        job.kind === "throughput"
          ? await throughput(job.route, job.body, job.connections, job.durationS, job.rate)
          : await alternateCalls(job.routes, job.body, job.n, (t) => (job.pick === "first" ? t.firstUs : t.endUs));
      console.log(JSON.stringify({ ok }));
    } catch (err) {
      console.log(JSON.stringify({ error: String(err) }));
    }
  }
}
