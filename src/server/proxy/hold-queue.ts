import type { Logger } from "pino";
import type { EndpointDirectory, EndpointRoute, ProxyLoad } from "../../module.js";
import { sendJson, type NodeRequest, type NodeResponse } from "../node-http.js";
import { KeptBody, type KeptBytes } from "./kept-body.js";
import { SHUN_MS } from "./replica-balancer.js";
import type { ProxyMetrics, RefusalReason } from "./proxy-metrics.js";

// Requests that found no ready replica while one is coming wait here, first in first out, per
// endpoint (SPEC.md section 2, "Endpoints that follow their load", Holding): bounded in time
// (holdMs) and in count (holdMax per endpoint in this process), dropped at once when their caller
// leaves, and sent to the first replica that becomes ready. Held requests are counted as the
// endpoint's load (ProxyLoad): they are what wakes and scales it. A request whose replicas could
// not be reached before any answer byte (a machine preempted or gone between two probes) comes
// back here rather than answering 502, passing those replicas over, while a replica is coming:
// once, and within the hold limit counted from when it was first held. A held request's body is
// kept in the process's KeptBytes: one that finds no room there is refused, not held.

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
  endpointId: string;
  path: string;
  body: KeptBody;
  /** When it was first held (performance.now() ms): its hold limit counts from there. */
  heldSince?: number;
  /** It came back to the queue once already: the next replicas it cannot reach answer 502. */
  requeued?: boolean;
}

/** What a request sent back by `requeue` answers when nothing else is coming: the replica's failure. */
export interface Unreached {
  instanceIds: string[];
  detail: string;
}

interface Entry extends Held {
  heldSince: number;
  /** This stay's start, for gpu_endpoint_hold_seconds. */
  since: bigint;
  timer: NodeJS.Timeout;
  onClose: () => void;
  /** Replicas that could not be reached, passed over until then (Date.now() ms). */
  avoid?: Map<string, number>;
  unreached?: Unreached;
}

interface Queue {
  entries: Entry[];
  poll: NodeJS.Timeout | undefined;
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
      for (const name of [...this.queues.keys()]) this.endAll(name, { reason: "stopping", detail: "the service is stopping" });
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
  hold(req: NodeRequest, res: NodeResponse, name: string, path: string, route: EndpointRoute): void {
    const { kept, maxBodyBytes, metrics } = this.options;
    const refusal = this.refusal(name) ?? (kept.bytes >= kept.limit ? keptBytesRefusal(name, kept) : undefined);
    if (refusal !== undefined) return refuse(res, metrics, name, refusal);
    // Read while held: the upload must end within HTTP_REQUEST_TIMEOUT_MS, whatever the wait.
    const body = new KeptBody(req, maxBodyBytes, kept, () => undefined);
    if (!body.replayable) return refuse(res, metrics, name, keptBytesRefusal(name, kept));
    const entry = this.enqueue({ req, res, name, endpointId: route.endpointId, path, body });
    body.onOverflow = () => this.onOverflow(entry);
  }

  /**
   * Holds again a request whose replicas (`unreached`) could not be reached before any answer
   * byte, its body kept: it goes to another replica that is or becomes ready, passing those over
   * for SHUN_MS; with nothing coming it answers 502 naming them. Once per request, and within
   * the hold limit counted from when it was first held (from now if it never was). False
   * (nothing done) when it cannot wait: requeued once already, its hold limit over, the queue
   * full, the service stopping, holding off, or its body not kept.
   */
  requeue(held: Held, unreached: Unreached): boolean {
    if (held.requeued === true || this.refusal(held.name) !== undefined || !held.body.replayable) return false;
    const heldSince = held.heldSince ?? performance.now();
    if (heldSince + this.options.holdMs <= performance.now()) return false;
    const until = Date.now() + SHUN_MS;
    const avoid = new Map(unreached.instanceIds.map((id) => [id, until]));
    const entry = this.enqueue({ ...held, heldSince, requeued: true }, { avoid, unreached });
    held.body.onOverflow = () => this.onOverflow(entry);
    return true;
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

  private enqueue(held: Held, extra: Pick<Entry, "avoid" | "unreached"> = {}): Entry {
    const { holdMs, metrics } = this.options;
    const { name, res } = held;
    let queue = this.queues.get(name);
    if (queue === undefined) {
      queue = { entries: [], poll: undefined };
      this.queues.set(name, queue);
    }
    const heldSince = held.heldSince ?? performance.now();
    const timeout: Refusal = { reason: "hold_timeout", detail: `no replica of endpoint '${name}' became ready within ${holdMs} ms` };
    const entry: Entry = {
      ...held,
      ...extra,
      heldSince,
      since: process.hrtime.bigint(),
      timer: setTimeout(() => {
        if (this.drop(entry)) refuse(res, metrics, name, timeout);
      }, Math.max(0, heldSince + holdMs - performance.now())),
      onClose: () => {
        // The caller left: dropped at once, no count left behind.
        if (this.drop(entry)) metrics.answered(name, 499);
      },
    };
    res.once("close", entry.onClose);
    held.body.onUnkept = () => {
      // Its body grew past the room left in the process's kept bytes while it waited.
      if (this.drop(entry)) refuse(res, metrics, name, keptBytesRefusal(name, this.options.kept));
    };
    queue.entries.push(entry);
    this.options.load.held(entry.endpointId, 1);
    this.schedule(name, queue);
    return entry;
  }

  private onOverflow(entry: Entry): void {
    if (!this.drop(entry)) return;
    const { maxBodyBytes, metrics } = this.options;
    metrics.answered(entry.name, 413);
    sendJson(entry.res, 413, { detail: `request body exceeds ${maxBodyBytes} bytes` }, entry.req.httpVersionMajor === 1 ? { connection: "close" } : {});
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
      if (targets.length > 0 && this.leave(entry)) this.options.dispatch(entry, { ...route, targets });
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
      this.options.logger.warn({ err, endpoint: name }, "endpoint directory failed while requests are held");
    }
    if (route === undefined) this.endAll(name, { status: 404, detail: `endpoint '${name}' not found` });
    else if (route !== null) {
      this.release(name, route);
      if (!route.coming) this.endAll(name, { reason: "not_coming", detail: refusalDetail(name, route.refusal) }, true);
    }
    if (queue.entries.length > 0) this.schedule(name, queue);
    else if (this.queues.get(name) === queue) this.queues.delete(name);
  }

  /** Answers every request held for `name`; with `nothingComing`, a requeued one its replicas' failure. */
  private endAll(name: string, answer: Refusal | { status: 404; detail: string }, nothingComing = false): void {
    const queue = this.queues.get(name);
    if (queue === undefined) return;
    for (const entry of [...queue.entries]) {
      if (!this.drop(entry)) continue;
      if (nothingComing && entry.unreached !== undefined) {
        this.options.metrics.answered(name, 502);
        sendJson(entry.res, 502, { detail: entry.unreached.detail }, { "x-endpoint-instance": entry.unreached.instanceIds.at(-1)! });
      } else if ("reason" in answer) refuse(entry.res, this.options.metrics, name, answer);
      else sendJson(entry.res, answer.status, { detail: answer.detail });
    }
  }

  /** Takes the entry out of its queue to be answered here: its kept body goes with it. */
  private drop(entry: Entry): boolean {
    if (!this.leave(entry)) return false;
    entry.body.release();
    return true;
  }

  /**
   * Takes the entry out of its queue, its body kept (it is being sent); false when it already
   * was (each way out runs once).
   */
  private leave(entry: Entry): boolean {
    const queue = this.queues.get(entry.name);
    const index = queue?.entries.indexOf(entry) ?? -1;
    if (queue === undefined || index < 0) return false;
    queue.entries.splice(index, 1);
    clearTimeout(entry.timer);
    entry.res.off("close", entry.onClose);
    entry.body.onUnkept = undefined;
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

/** 503 with Retry-After: the caller may come back; counted per endpoint, and by reason. */
export function refuse(res: NodeResponse, metrics: ProxyMetrics, name: string, { reason, detail }: Refusal): void {
  metrics.answered(name, 503);
  metrics.refused(name, reason);
  sendJson(res, 503, { detail }, { "retry-after": String(RETRY_AFTER_SECONDS) });
}
