// npm run bench:serve, the callers: every arrival of the day is one streamed chat completion sent
// through the service's proxy to each endpoint at the same wall moment, so that the policies face
// the same load. Each request is counted as answered (200 and the stream ends with [DONE]) or
// failed (another status, a connection error, or a stream cut before [DONE]), with its wait to
// the first byte of the answer. A cut stream keeps the replica that answered it
// (x-endpoint-instance): the report tells those cut by a preemption from the others.
import { Agent, request } from "node:http";

const BODY = (tokens: number) =>
  JSON.stringify({ model: "Qwen/Qwen2.5-Coder-7B-Instruct", messages: [{ role: "user", content: "Say hi" }], max_tokens: tokens, stream: true });

export interface Tally {
  answered: number;
  failed: number;
  /** Failed requests by what happened: an HTTP status, `cut` or `error`. */
  failures: Map<string, number>;
  /** Wait from the send to the answer's first body byte, wall ms, of answered requests. */
  firstByteMs: number[];
  /** Failed requests per simulated hour of their arrival. */
  failedByHour: number[];
  /** The replica of each stream cut mid-answer (x-endpoint-instance). */
  cutOn: string[];
  inFlight: number;
  /** The most requests this client had open at once. */
  maxOpen: number;
}

export function newTally(): Tally {
  return { answered: 0, failed: 0, failures: new Map(), firstByteMs: [], failedByHour: Array.from({ length: 24 }, () => 0), cutOn: [], inFlight: 0, maxOpen: 0 };
}

/** One streamed request to `/endpoints/{name}/v1/chat/completions`; resolves when it has ended either way. */
export function streamOnce(agent: Agent, port: number, name: string, tokens: number, tally: Tally, hour: number): Promise<void> {
  const sent = performance.now();
  tally.inFlight += 1;
  tally.maxOpen = Math.max(tally.maxOpen, tally.inFlight);
  return new Promise<void>((resolve) => {
    let settled = false;
    const done = (failure?: string, firstByte?: number) => {
      if (settled) return;
      settled = true;
      tally.inFlight -= 1;
      if (failure === undefined) {
        tally.answered += 1;
        tally.firstByteMs.push(firstByte!);
      } else {
        tally.failed += 1;
        tally.failures.set(failure, (tally.failures.get(failure) ?? 0) + 1);
        tally.failedByHour[hour] = (tally.failedByHour[hour] ?? 0) + 1;
      }
      resolve();
    };
    const req = request(
      { agent, host: "127.0.0.1", port, path: `/endpoints/${name}/v1/chat/completions`, method: "POST", headers: { "content-type": "application/json" } },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          res.once("end", () => done(String(res.statusCode)));
          res.once("error", () => done(String(res.statusCode)));
          return;
        }
        let firstByte: number | undefined;
        let tail = "";
        const cut = () => {
          if (!settled) tally.cutOn.push(String(res.headers["x-endpoint-instance"]));
          done("cut");
        };
        res.on("data", (chunk: Buffer) => {
          firstByte ??= performance.now() - sent;
          tail = (tail + chunk.toString()).slice(-32);
        });
        res.once("end", () => (tail.endsWith("data: [DONE]\n\n") ? done(undefined, firstByte) : cut()));
        res.once("error", cut);
        res.once("aborted", cut);
      },
    );
    req.once("error", (err: NodeJS.ErrnoException) => done(`error ${err.code ?? err.message}`));
    req.end(BODY(tokens));
  });
}
