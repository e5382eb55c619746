// npm run bench:serve, the callers: every arrival of the day is one streamed chat completion sent
// through the service's proxy to each endpoint at the same wall moment, so that the policies face
// the same load. Each request is counted as answered (200 and the stream ends with [DONE]) or
// failed (another status, a connection error, or a stream cut before [DONE]), with its wait to
// the first byte of the answer. A cut stream keeps the replica that answered it
// (x-endpoint-instance): the report tells those cut by a preemption from the others. A request
// that failed before its answer started is kept with what tells its path apart: the error, the
// wall time since it was sent, and whether it went on a kept-alive connection and how long that
// had been idle.
import { readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import type { Socket } from "node:net";

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
  /** Each request that failed before its answer started. */
  beforeAnswer: FailureBeforeAnswer[];
  inFlight: number;
  /** The most requests this client had open at once. */
  maxOpen: number;
}

/** A request that failed before its answer started, and what tells its path apart. */
export interface FailureBeforeAnswer {
  /** Its arrival, simulated seconds of the day. */
  atS: number;
  /** An HTTP status, or `error CODE`. */
  what: string;
  /** The error's message (a connection error). */
  message?: string;
  /** Wall ms from the send to the failure. */
  afterMs: number;
  /** Sent on a connection kept alive from an earlier request. */
  reused: boolean;
  /** How long that connection had been idle when this request took it, wall ms. */
  idleMs?: number;
  /** The connection's local port, to find it in a capture. */
  localPort?: number;
  /** A new connection's error: the service's listening socket then (listenQueueOf). */
  listenQueue?: string;
}

export function newTally(): Tally {
  return {
    answered: 0,
    failed: 0,
    failures: new Map(),
    firstByteMs: [],
    failedByHour: Array.from({ length: 24 }, () => 0),
    cutOn: [],
    beforeAnswer: [],
    inFlight: 0,
    maxOpen: 0,
  };
}

/** The longest an idle connection is kept, whatever the server's hint: node's global agent's. */
const IDLE_MS = 5_000;

/** When each kept-alive connection was last given back to its agent (performance.now() ms). */
const freedAt = new WeakMap<Socket, number>();

/**
 * The callers' keep-alive agent, one per endpoint, as node's own global agent is made: with a
 * `timeout`, under which node's agent drops an idle connection 1 s before the server's
 * `Keep-Alive: timeout=N` says the server may close it. Without one it keeps idle connections for
 * ever, and a request sent on a connection the service had just closed (5 s idle, plus node's
 * 1 s) was reset before its answer. The timeout only notifies a request in flight: a held one is
 * not cut.
 */
export function callerAgent(): Agent {
  const agent = new Agent({ keepAlive: true, timeout: IDLE_MS });
  agent.on("free", (socket: Socket) => freedAt.set(socket, performance.now()));
  return agent;
}

/** One streamed request to `/endpoints/{name}/v1/chat/completions`, arriving at simulated second `atS`; resolves when it has ended either way. */
export function streamOnce(agent: Agent, port: number, name: string, tokens: number, tally: Tally, atS: number): Promise<void> {
  const hour = Math.floor(atS / 3_600);
  const sent = performance.now();
  tally.inFlight += 1;
  tally.maxOpen = Math.max(tally.maxOpen, tally.inFlight);
  return new Promise<void>((resolve) => {
    let settled = false;
    let connection: Pick<FailureBeforeAnswer, "reused" | "idleMs" | "localPort"> = { reused: false };
    const done = (failure?: string, firstByte?: number, message?: string) => {
      if (settled) return;
      settled = true;
      if (failure !== undefined && failure !== "cut") {
        const listenQueue = message !== undefined && !connection.reused ? listenQueueOf(port) : undefined;
        tally.beforeAnswer.push({ atS, what: failure, message, afterMs: performance.now() - sent, ...connection, ...(listenQueue && { listenQueue }) });
      }
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
    req.once("socket", (socket: Socket) => {
      const freed = freedAt.get(socket);
      connection = { reused: req.reusedSocket, idleMs: req.reusedSocket && freed !== undefined ? performance.now() - freed : undefined, localPort: socket.localPort };
      // A new connection's port is known once it is connected.
      if (socket.localPort === undefined) socket.once("connect", () => (connection.localPort = socket.localPort));
    });
    req.once("error", (err: NodeJS.ErrnoException) => done(`error ${err.code ?? err.message}`, undefined, err.message));
    req.end(BODY(tokens));
  });
}

/**
 * The connections the system holds for the service's listening port and has not handed to the
 * process yet (accept queue, and its bound) and the half-open ones, from /proc/net/tcp (Linux;
 * undefined elsewhere): a new connection that fails with the accept queue full was never seen by
 * the service. Read at most once a second.
 */
export function listenQueueOf(port: number): string | undefined {
  const now = performance.now();
  const last = lastListenRead.get(port);
  if (last !== undefined && now - last.at < 1_000) return last.text;
  let table: string;
  try {
    table = readFileSync("/proc/net/tcp", "utf8");
  } catch {
    return undefined;
  }
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  let text: string | undefined;
  let halfOpen = 0;
  for (const line of table.split("\n").slice(1)) {
    const [, local, , state, queues] = line.trim().split(/\s+/);
    if (local?.split(":")[1] !== hexPort) continue;
    // 0A: listening (its rx_queue: connections waiting for accept, at most node's backlog of 511); 03: SYN_RECV.
    if (state === "0A") text = `accept queue ${parseInt(queues!.split(":")[1]!, 16)} (node's backlog 511)`;
    else if (state === "03") halfOpen += 1;
  }
  text = text === undefined ? undefined : `${text}, ${halfOpen} half-open`;
  lastListenRead.set(port, { at: now, text });
  return text;
}

const lastListenRead = new Map<number, { at: number; text: string | undefined }>();
