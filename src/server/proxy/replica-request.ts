import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Dispatcher } from "undici";
import type { ProxyLoad, RouteTarget } from "../../module.js";
import type { ConnectionAware, ReplicaBalancer } from "./replica-balancer.js";

// One request to one replica, however the proxy sends it (a caller's request, its retry, a
// continuation of a cut answer): dispatched on the balancer's undici keep-alive pool for that
// replica (the pool holds the connect timeout), counted in flight for the load and the
// least-outstanding choice until it is over. Its answer is handed over chunk by chunk, with no
// stream object between the replica's socket and the caller's.

export { CONNECT_TIMEOUT_MS } from "./replica-balancer.js";

export interface ReplicaHop {
  balancer: ReplicaBalancer;
  load: ProxyLoad;
  /** Parsed replica URLs, by URL text. */
  addresses: Map<string, Address>;
}

interface Address {
  origin: string;
  basePath: string;
}

/** A replica's answer, its headers in: its bytes go to `read`'s callbacks (dropped until one is set). */
export interface ReplicaAnswer {
  readonly status: number;
  /** As node:http gives them: lower-case names, repeated values joined (set-cookie a list). */
  readonly headers: IncomingHttpHeaders;
  /** Takes the bytes as they come, then the end: complete false when the answer was cut (or abandoned). */
  read(onData: (chunk: Buffer) => void, onEnd: (complete: boolean) => void): void;
  /** Holds the replica back (a slow caller) until `resume`. */
  pause(): void;
  resume(): void;
}

/** What the sender of a replica request hears. */
export interface ReplicaListener {
  onResponse(answer: ReplicaAnswer): void;
  /** No answer came: the request could not be sent, or was destroyed before its answer. */
  onError(err: NodeJS.ErrnoException, reused: boolean): void;
}

export interface ReplicaRequest {
  /** Abandons the request: its error (before an answer) or its answer's cut end (after) is reported at once. */
  destroy(): void;
}

export function requestReplica(
  hop: ReplicaHop,
  endpointId: string,
  target: RouteTarget,
  method: string | undefined,
  path: string,
  headers: OutgoingHttpHeaders,
  body: Buffer | Readable | null,
  listener: ReplicaListener,
): ReplicaRequest {
  const address = addressOf(hop, target.url);
  const pool = hop.balancer.begin(target, address.origin);
  hop.load.sent(endpointId, target.instanceId, 1);
  const call = new ReplicaCall(listener, () => {
    hop.balancer.end(target);
    hop.load.sent(endpointId, target.instanceId, -1);
  }, () => hop.balancer.connected(target));
  call.dispatching = true;
  pool.dispatch({ method: (method ?? "GET") as Dispatcher.HttpMethod, path: address.basePath + path, headers: headers as Record<string, string>, body }, call);
  call.dispatching = false;
  return call;
}

const noData = (): void => undefined;

/** undici's dispatch handler for one request, and the answer it hands on. */
class ReplicaCall implements Dispatcher.DispatchHandlers, ReplicaAnswer, ReplicaRequest, ConnectionAware {
  connection?: () => Socket | undefined;
  status = 0;
  headers: IncomingHttpHeaders = {};
  private onChunk: (chunk: Buffer) => void = noData;
  private onEnd: ((complete: boolean) => void) | undefined;
  private abort: ((err: Error) => void) | undefined;
  private resumeReplica: (() => void) | undefined;
  private paused = false;
  private answered = false;
  private over = false;
  /** undici reports a request it refuses at once, inside dispatch: the sender hears it after dispatch returns. */
  dispatching = false;

  constructor(
    private readonly listener: ReplicaListener,
    private readonly done: () => void,
    /** Whether the pool had a connection up before: a reset may then be an idle connection's. */
    private readonly pooled: () => boolean,
  ) {}

  onConnect(abort: (err?: Error) => void): void {
    if (this.over) abort(abandoned());
    else this.abort = abort;
  }

  onHeaders(status: number, raw: Buffer[], resume: () => void): boolean {
    if (this.over) return false;
    // 1xx: informational, the answer is still to come.
    if (status < 200) return true;
    this.status = status;
    this.headers = headersOf(raw);
    this.resumeReplica = resume;
    this.answered = true;
    this.listener.onResponse(this);
    return !this.paused;
  }

  onData(chunk: Buffer): boolean {
    if (this.over) return false;
    this.onChunk(chunk);
    return !this.paused;
  }

  onComplete(): void {
    if (!this.over) this.close(true);
  }

  onError(err: Error): void {
    if (this.over) return;
    if (this.dispatching) return queueMicrotask(() => this.onError(err));
    const error = err as NodeJS.ErrnoException;
    this.over = true;
    if (!this.answered) this.listener.onError(error, RESET_CODES.has(error.code ?? "") && this.pooled());
    this.close(false);
  }

  read(onData: (chunk: Buffer) => void, onEnd: (complete: boolean) => void): void {
    this.onChunk = onData;
    this.onEnd = onEnd;
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.resumeReplica?.();
  }

  destroy(): void {
    if (this.over) return;
    this.close(false, this.answered ? undefined : abandoned(), true);
    // Not sent yet: onConnect aborts it when it is. Sent: its connection (its client's one, one
    // request at a time) is dropped, the replica sees the close.
    if (this.abort === undefined) return;
    const socket = this.connection?.();
    if (socket !== undefined && !socket.destroyed) socket.destroy(abandoned());
    else this.abort(abandoned());
  }

  /**
   * Over: counted out at once. Destroyed (`abandoned`), its sender hears of it (an error before
   * the answer, the answer's end after it) on the next tick, as from node:http: never inside its
   * own call to destroy.
   */
  private close(complete: boolean, abandonedBefore?: NodeJS.ErrnoException, destroyed = false): void {
    this.over = true;
    this.onChunk = noData;
    this.done();
    const onEnd = this.onEnd;
    this.onEnd = undefined;
    if (destroyed) {
      if (abandonedBefore !== undefined) process.nextTick(() => this.listener.onError(abandonedBefore, false));
      if (onEnd !== undefined) process.nextTick(onEnd, complete);
    } else onEnd?.(complete);
  }
}

/** Errors of a connection that was up: on a reused one, they say nothing of the replica. */
const RESET_CODES = new Set(["UND_ERR_SOCKET", "ECONNRESET", "EPIPE"]);

function abandoned(): NodeJS.ErrnoException {
  return Object.assign(new Error("request abandoned"), { code: "ECONNABORTED" });
}

/** undici's raw headers as node:http reads them. */
function headersOf(raw: Buffer[]): IncomingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toString("latin1").toLowerCase();
    const value = raw[i + 1]!.toString("latin1");
    const before = out[name];
    if (before === undefined) out[name] = name === "set-cookie" ? [value] : value;
    else if (Array.isArray(before)) before.push(value);
    else out[name] = `${before}, ${value}`;
  }
  return out;
}

function addressOf(hop: ReplicaHop, url: string): Address {
  let address = hop.addresses.get(url);
  if (address === undefined) {
    const parsed = new URL(url);
    address = { origin: parsed.origin, basePath: parsed.pathname.replace(/\/+$/, "") };
    // Replicas come and go over weeks; the map is a cache, not a registry.
    if (hop.addresses.size >= 1024) hop.addresses.clear();
    hop.addresses.set(url, address);
  }
  return address;
}
