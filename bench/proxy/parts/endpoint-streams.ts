// bench:endpoint's streamed answers: what reading a stream costs the proxy. One replica (the bench's
// minimal one, sse-replica.ts) sends the same 64-token stream to a streamed chat completion, which
// the proxy reads through its continuation reader (an answer that survives its replica), and to
// POST PASS_THROUGH_PATH, which the proxy does not read and pipes untouched. Both through the same
// proxy process, alternately, at the same load; the proxy's CPU per chunk for each, the
// difference, and the reader alone (stream-reader-cost.ts) for reference.
import { checkStream, fmt, type Route } from "./http-timing.js";
import { startLoad } from "./load-process.js";
import { spawnPart, targetOf, TOKEN } from "./processes.js";
import { PASS_THROUGH_PATH, STREAM_CHUNKS, STREAM_TOKENS, STREAMED_64 } from "./sse-replica.js";
import { streamReaderCost } from "./stream-reader-cost.js";
import { printTable, processCpuSeconds } from "../../shared/support.js";

const ROUNDS = 2;

export async function compareStreamReading(options: { inFlight: number; durationS: number }): Promise<void> {
  const replica = await spawnPart("sse-replica");
  const proxy = await spawnPart("proxy", [JSON.stringify({ sse: [targetOf(replica, "gpu-bench-sse")] })]);
  const load = await startLoad();
  try {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const routes: Record<"read" | "piped", Route> = {
      read: { port: proxy.port, path: "/endpoints/sse/v1/chat/completions", headers: auth },
      piped: { port: proxy.port, path: `/endpoints/sse${PASS_THROUGH_PATH}`, headers: auth },
    };
    for (const route of Object.values(routes)) await checkStream(route, STREAMED_64);
    const cpuUs = { read: [] as number[], piped: [] as number[] };
    const errors = { read: 0, piped: 0 };
    for (const name of ["read", "piped"] as const) await load.throughput(routes[name], STREAMED_64, options.inFlight, options.durationS);
    for (let round = 0; round < ROUNDS; round++) {
      // Alternately first, so that neither always runs on the warmer or the quieter machine.
      for (const name of round % 2 === 0 ? (["read", "piped"] as const) : (["piped", "read"] as const)) {
        const before = processCpuSeconds(proxy.child.pid!);
        const run = await load.throughput(routes[name], STREAMED_64, options.inFlight, options.durationS);
        cpuUs[name].push(((processCpuSeconds(proxy.child.pid!) - before) / run.total) * 1e6);
        errors[name] += run.errors;
      }
    }
    const perChunk = (name: "read" | "piped") => cpuUs[name].reduce((sum, v) => sum + v, 0) / cpuUs[name].length / STREAM_CHUNKS;
    const [read, piped] = [perChunk("read"), perChunk("piped")];
    console.log(`\nstreamed answers through the proxy: ${STREAM_TOKENS} tokens (${STREAM_CHUNKS} events) from a replica answering at once, ${options.inFlight} in flight, ${ROUNDS} rounds of ${options.durationS} s alternating\n`);
    printTable([
      ["", "proxy CPU per chunk us", "errors"],
      ["read (streamed completion, continuation reader)", fmt(read), String(errors.read)],
      [`piped untouched (POST ${PASS_THROUGH_PATH}, same bytes)`, fmt(piped), String(errors.piped)],
      ["difference (what reading costs)", fmt(read - piped), ""],
      ["the reader alone, streamReaderCost() (usage cut out)", fmt(streamReaderCost() / 1000), ""],
    ]);
  } finally {
    for (const part of [load.part, proxy, replica]) part.child.kill("SIGTERM");
  }
}
