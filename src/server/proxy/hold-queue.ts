import type { Logger } from "pino";
import type { EndpointDirectory, EndpointRoute, ProxyLoad } from "../../module.js";
import type { NodeRequest, NodeResponse } from "../node-http.js";
import { sendRefusalBody } from "./refusal-body.js";
import { NO_USAGE } from "./answer-usage.js";
import type { CallerAllowance } from "./caller-allowance.js";
import { KeptBody, type KeptBytes } from "./kept-body.js";
import { SHUN_MS } from "./replica-balancer.js";
import type { ProxyMetrics, RefusalReason } from "./proxy-metrics.js";

// Requests that found no ready replica while one is coming wait here, first in first out, per
// endpoint (SPEC.md section 2, "Endpoints that follow their load", Holding): bounded in time
// (holdMs) and in count (holdMax per endpoint in this process), dropped at once when their caller
// leaves, and sent to the first replica that becomes ready. Held requests are counted as the
// endpoint's load (ProxyLoad): they are what wakes and scales it. A request whose replicas failed
// before any answer byte (a machine preempted or gone between two probes, a 502/503/504) comes
// back here rather than answering 502, passing those replicas over, while a replica is coming:
// as often as that happens, within the hold limit counted from when it was first held. A held
// request's body is kept in the process's KeptBytes: one that finds no room there is refused from
// its headers, its body not read and its connection closed (a flood of large bodies must not be
// read only to be dropped). A streamed
// answer cut mid-way whose continuation finds no ready replica (streamed-answer.ts) waits in the
// same queue, by the same rules, its hold limit counted from the cut.

/** What a caller is told to wait before asking again: about one readiness probe. */
export const RETRY_AFTER_SECONDS = 10;

/** How often an endpoint with held requests asks the directory again (which caches about a second). */
export const HOLD_POLL_MS = 250;

export interface HoldOptions {
  directory: EndpointDirectory;
  holdMs: number;
  holdMax: number;
  maxBodyBytes: number;
  /** The bytes of bodies kept in this process, and their bound (GPU_ENDPOINT_KEPT_BODY_BYTES). */
  kept: KeptBytes;
  load: ProxyLoad;
  metrics: ProxyMetrics;
  logger: Logger;
  /** Aborted when the service stops: held requests are answered 503 at once, none is held anew. */
  shutdown?: AbortSignal;
  /** Sends a request that waited to one of `route`'s ready replicas; the first-byte limit starts there. */
  dispatch(held: Held, route: EndpointRoute): void;
}

/** A request waiting for a replica, with its body read (and kept) meanwhile. */
export interface Held {
  req: NodeRequest;
  res: NodeResponse;
  name: string;
  /** Who calls: the token's or key's name, for its usage. */
  caller: string;
  endpointId: string;
  path: string;
  body: KeptBody;
  /** When it was first held (performance.now() ms): its hold limit counts from there. */
  heldSince?: number;
  /** The replicas that failed it before any answer byte: not asked again for SHUN_MS. */
  failed?: string[];
  /** Its caller's limits, admitted before it was held: settled when it is answered here. */
  allowance?: CallerAllowance;
}

/** What a request sent back by `requeue` answers when nothing else is coming: the replica's failure. */
export interface Unreached {
  instanceIds: string[];
  detail: string;
}

/** A streamed answer cut mid-way, waiting for a replica to continue it. */
export interface HeldContinuation {
  name: string;
  endpointId: string;
  /** When its answer was cut (performance.now() ms): its hold limit counts from there. */
  cutAt: number;
  /** The replicas that failed it: never asked to continue it. */
  failed: string[];
  /** A replica is ready: `route`'s targets are the ones it may go to. */
  resume(route: EndpointRoute): void;
  /** Nobody will continue it (the hold limit, nothing coming, the queue full, the service stopping): why. */
  giveUp(detail: string): void;
}

/** How a waiting entry is answered when it cannot wait any more. */
type Ending = { refusal: Refusal; detail?: undefined; nothingComing?: boolean } | { refusal?: undefined; status: 404 | 413; detail: string };

/** One waiter in an endpoint's queue: a held request or a held continuation. */
interface Entry {
  name: string;
  endpointId: string;
  heldSince: number;
  /** This stay's start, for gpu_endpoint_hold_seconds. */
  since: bigint;
  timer: NodeJS.Timeout;
  /** Replicas passed over until then (Date.now() ms). */
  avoid?: Map<string, number>;
  /** Sends it on to one of `route`'s replicas. */
  dispatch(route: EndpointRoute): void;
  /** Answers it here. */
  end(ending: Ending): void;
  /** Called once it leaves the queue, whichever way. */
  left(): void;
}

interface Queue {
  entries: Entry[];
  poll: NodeJS.Timeout | undefined;
  /** The directory failed its last poll: said once, not every poll, until it answers again. */
  unreadable: boolean;
}

/** The 503's detail for an endpoint with no ready replica and none coming. */
export function refusalDetail(name: string, refusal: EndpointRoute["refusal"]): string {
  switch (refusal) {
    case "parked":
      return `endpoint '${name}' is parked (replicas 0): no replica is coming`;
    case "deleting":
      return `endpoint '${name}' is being deleted`;
    case "budget":
      return `endpoint '${name}' has no ready replica, and its budget (max_cost_per_hour) holds every launch back`;
    default:
      return `endpoint '${name}' has no ready replica`;
  }
}

export class HoldQueues {
  private readonly queues = new Map<string, Queue>();

  constructor(private readonly options: HoldOptions) {
    options.shutdown?.addEventListener("abort", () => {
      for (const name of [...this.queues.keys()]) this.endAll(name, { refusal: { reason: "stopping", detail: "the service is stopping" } });
    });
  }

  /** Requests held for `name` in this process now. */
  waiting(name: string): number {
    return this.queues.get(name)?.entries.length ?? 0;
  }

  /**
   * Holds the request, or answers 503 at once when the queue is full, the service stops, or its
   * declared body finds no room in the process's kept bytes (one that grows past them while held
   * is answered 503 then).
   */
  hold(req: NodeRequest, res: NodeResponse, name: string, caller: string, path: string, route: EndpointRoute, allowance?: CallerAllowance): void {
    const { kept, maxBodyBytes, metrics } = this.options;
    // Decided from the headers (a declared length that does not fit): the body is never read.
    const declared = Number(req.headers["content-length"] ?? 0);
    const fits = kept.bytes < kept.limit && !(declared > kept.limit - kept.bytes);
    const refusal = this.refusal(name) ?? (fits ? undefined : keptBytesRefusal(name, kept));
    if (refusal !== undefined) {
      allowance?.settle(NO_USAGE);
      return refuse(res, metrics, name, refusal, req);
    }
    // Read while held: the upload must end within HTTP_REQUEST_TIMEOUT_MS, whatever the wait.
    const body = new KeptBody(req, maxBodyBytes, kept, () => undefined);
    if (!body.replayable) {
      allowance?.settle(NO_USAGE);
      return refuse(res, metrics, name, keptBytesRefusal(name, kept), req);
    }
    this.enqueueRequest({ req, res, name, caller, endpointId: route.endpointId, path, body, allowance });
  }

  /**
   * Holds again a request whose replicas (`unreached`) failed before any answer byte, its body
   * kept: it goes to another replica that is or becomes ready, passing those over for SHUN_MS;
   * with nothing coming it answers 502 naming the last. Within the hold limit counted from when
   * it was first held (from now if it never was). False (nothing done) when it cannot wait: its
   * hold limit over, the queue full, the service stopping, holding off, or its body not kept.
   */
  requeue(held: Held, unreached: Unreached): boolean {
    if (this.refusal(held.name) !== undefined || !held.body.replayable) return false;
    const heldSince = held.heldSince ?? performance.now();
    if (heldSince + this.options.holdMs <= performance.now()) return false;
    const until = Date.now() + SHUN_MS;
    const avoid = new Map(unreached.instanceIds.map((id) => [id, until]));
    this.enqueueRequest({ ...held, heldSince }, avoid, unreached);
    return true;
  }

  /**
   * Holds a cut answer's continuation until a replica other than the ones that failed it is
   * ready, or answers `giveUp` at once when it cannot wait. Returns how to take it out of the
   * queue unanswered (its caller left), or undefined when it was not held.
   */
  holdContinuation(c: HeldContinuation): (() => void) | undefined {
    const refusal = this.refusal(c.name);
    if (refusal !== undefined) {
      c.giveUp(refusal.detail);
      return undefined;
    }
    const entry = this.enqueue({
      name: c.name,
      endpointId: c.endpointId,
      heldSince: c.cutAt,
      avoid: new Map(c.failed.map((id) => [id, Infinity])),
      dispatch: (route) => c.resume(route),
      end: (ending) => c.giveUp(ending.detail ?? ending.refusal.detail),
      left: () => undefined,
    });
    return () => void this.leave(entry);
  }

  /** Why a request cannot wait here now, or undefined. */
  private refusal(name: string): Refusal | undefined {
    if (this.options.shutdown?.aborted) return { reason: "stopping", detail: "the service is stopping" };
    if (this.options.holdMs === 0) return { reason: "holding_off", detail: refusalDetail(name, undefined) };
    if (this.waiting(name) >= this.options.holdMax) {
      const detail = `endpoint '${name}' has no ready replica, and ${this.waiting(name)} requests already wait for one here (GPU_ENDPOINT_HOLD_MAX)`;
      return { reason: "hold_full", detail };
    }
    return undefined;
  }

  /** Holds a request: its kept body is let go when it is answered here, and its caller's leaving drops it. */
  private enqueueRequest(held: Held, avoid?: Map<string, number>, unreached?: Unreached): void {
    const { metrics, maxBodyBytes, kept } = this.options;
    const { name, req, res, body } = held;
    const onClose = () => {
      // The caller left: dropped at once, no count left behind.
      if (!this.leave(entry)) return;
      body.release();
      held.allowance?.settle(NO_USAGE);
      metrics.answered(name, 499);
    };
    const entry = this.enqueue({
      name,
      endpointId: held.endpointId,
      heldSince: held.heldSince ?? performance.now(),
      avoid,
      dispatch: (route) => this.options.dispatch({ ...held, heldSince: entry.heldSince }, route),
      end: (ending) => {
        body.release();
        held.allowance?.settle(NO_USAGE);
        if (ending.refusal === undefined) {
          metrics.answered(name, ending.status);
          sendRefusalBody(res, ending.status, ending.detail, ending.status === 413 ? closeUnread(req, res) : {});
        } else if (ending.nothingComing && unreached !== undefined) {
          metrics.answered(name, 502);
          sendRefusalBody(res, 502, unreached.detail, { "x-endpoint-instance": unreached.instanceIds.at(-1)! });
        } else refuse(res, metrics, name, ending.refusal, req);
      },
      left: () => {
        res.off("close", onClose);
        body.onUnkept = undefined;
      },
    });
    res.once("close", onClose);
    body.onOverflow = () => this.answer(entry, { status: 413, detail: `request body exceeds ${maxBodyBytes} bytes` });
    // Its body grew past the room left in the process's kept bytes while it waited.
    body.onUnkept = () => this.answer(entry, { refusal: keptBytesRefusal(name, kept) });
  }

  private enqueue(waiter: Omit<Entry, "since" | "timer">): Entry {
    const { holdMs } = this.options;
    const { name } = waiter;
    let queue = this.queues.get(name);
    if (queue === undefined) {
      queue = { entries: [], poll: undefined, unreadable: false };
      this.queues.set(name, queue);
    }
    const timeout: Refusal = { reason: "hold_timeout", detail: `no replica of endpoint '${name}' became ready within ${holdMs} ms` };
    const entry: Entry = {
      ...waiter,
      since: process.hrtime.bigint(),
      timer: setTimeout(() => this.answer(entry, { refusal: timeout }), Math.max(0, waiter.heldSince + holdMs - performance.now())),
    };
    queue.entries.push(entry);
    this.options.load.held(entry.endpointId, 1);
    this.schedule(name, queue);
    return entry;
  }

  /** Answers the entry here, if it still waits. */
  private answer(entry: Entry, ending: Ending): void {
    if (this.leave(entry)) entry.end(ending);
  }

  /**
   * Sends every request held for `name` to `route`'s ready replicas, first in first out; one that
   * passes over every ready replica (it could not reach them) stays.
   */
  release(name: string, route: EndpointRoute): void {
    const queue = this.queues.get(name);
    if (queue === undefined) return;
    const now = Date.now();
    for (const entry of [...queue.entries]) {
      const targets = route.targets.filter((target) => (entry.avoid?.get(target.instanceId) ?? 0) <= now);
      if (targets.length > 0 && this.leave(entry)) entry.dispatch({ ...route, targets });
    }
  }

  private schedule(name: string, queue: Queue): void {
    if (queue.poll !== undefined) return;
    queue.poll = setTimeout(() => void this.poll(name, queue), HOLD_POLL_MS);
    queue.poll.unref();
  }

  private async poll(name: string, queue: Queue): Promise<void> {
    queue.poll = undefined;
    let route: EndpointRoute | undefined | null = null;
    try {
      route = await this.options.directory.route(name);
    } catch (err) {
      // The database away is not the caller's fault: the request keeps waiting, up to holdMs.
      if (!queue.unreadable) this.options.logger.warn({ err, endpoint: name }, "endpoint directory failed while requests are held");
    }
    queue.unreadable = route === null;
    if (route === undefined) this.endAll(name, { status: 404, detail: `endpoint '${name}' not found` });
    else if (route !== null) {
      this.release(name, route);
      if (!route.coming) this.endAll(name, { refusal: { reason: "not_coming", detail: refusalDetail(name, route.refusal) }, nothingComing: true });
    }
    if (queue.entries.length > 0) this.schedule(name, queue);
    else if (this.queues.get(name) === queue) this.queues.delete(name);
  }

  /** Answers every entry held for `name`. */
  private endAll(name: string, ending: Ending): void {
    for (const entry of [...(this.queues.get(name)?.entries ?? [])]) this.answer(entry, ending);
  }

  /**
   * Takes the entry out of its queue (a request's body still kept: it is being sent, or is let
   * go by its answer); false when it already was (each way out runs once).
   */
  private leave(entry: Entry): boolean {
    const queue = this.queues.get(entry.name);
    const index = queue?.entries.indexOf(entry) ?? -1;
    if (queue === undefined || index < 0) return false;
    queue.entries.splice(index, 1);
    clearTimeout(entry.timer);
    entry.left();
    this.options.load.held(entry.endpointId, -1);
    this.options.metrics.held(entry.name, Number(process.hrtime.bigint() - entry.since) / 1e9);
    if (queue.entries.length === 0 && queue.poll !== undefined) {
      clearTimeout(queue.poll);
      this.queues.delete(entry.name);
    }
    return true;
  }
}

/** A 503 of the proxy's own: why, for the metric, and what the caller reads. */
export interface Refusal {
  reason: RefusalReason;
  detail: string;
}

function keptBytesRefusal(name: string, kept: KeptBytes): Refusal {
  return {
    reason: "kept_bytes",
    detail: `endpoint '${name}' has no ready replica, and the request bodies this process keeps (held, or for a retry) already fill GPU_ENDPOINT_KEPT_BODY_BYTES (${kept.limit} bytes)`,
  };
}

/**
 * 503 with Retry-After: the caller may come back; counted per endpoint, and by reason. Given its
 * request, a body not read yet is left unread: the connection closes once the answer is out.
 */
export function refuse(res: NodeResponse, metrics: ProxyMetrics, name: string, { reason, detail }: Refusal, req?: NodeRequest): void {
  metrics.answered(name, 503);
  metrics.refused(name, reason);
  const close = req === undefined ? {} : closeUnread(req, res);
  sendRefusalBody(res, 503, detail, { "retry-after": String(RETRY_AFTER_SECONDS), ...close }, { code: reason });
}

/**
 * How long a connection closed on an unread body stays half-open after its answer (nginx's
 * lingering_timeout): closed at once, the bytes still unread make the system reset it, and a
 * reset can take the answer with it before a busy caller has read it (RFC 9112, 9.6).
 */
export const LINGER_MS = 5_000;

/**
 * An answer given before its request's body has arrived: over HTTP/1.1 the body is not read (node
 * would read all of it to keep the connection), the connection closes once the answer is flushed
 * (`Connection: close`). HTTP/2's flow control already bounds what a stream sends unread.
 */
export function closeUnread(req: NodeRequest, res: NodeResponse): Record<string, string> {
  if (req.httpVersionMajor !== 1 || req.complete) return {};
  const socket = req.socket;
  req.pause();
  // Once the answer is written to the system, node:http reads (and drops) the body and ends the
  // connection with destroySoon (its end is sent after the answer, then the socket is destroyed).
  // Here it ends the connection but neither reads on nor destroys it at once: the socket stays
  // half-open, unread, for LINGER_MS or until the caller closes it, so that its caller reads the
  // answer before the reset that the unread bytes bring.
  socket.destroySoon = () => {
    socket.end();
    // Unref'd: a stopping process destroys its sockets itself, and waits for no caller.
    const linger = setTimeout(() => socket.destroy(), LINGER_MS).unref();
    socket.once("close", () => clearTimeout(linger));
    // node resumes the body's reading on the next tick (to drop it): stopped after that.
    setImmediate(() => socket.pause());
  };
  res.once("finish", () => socket.pause());
  return { connection: "close" };
}
