import type { Logger } from "pino";
import type { EndpointDirectory, EndpointRoute, ProxyLoad } from "../../module.js";
import { sendJson, type NodeRequest, type NodeResponse } from "../node-http.js";
import { KeptBody } from "./kept-body.js";
import { SHUN_MS } from "./replica-balancer.js";
import type { ProxyMetrics } from "./proxy-metrics.js";

// Requests that found no ready replica while one is coming wait here, first in first out, per
// endpoint (SPEC.md section 2, "Endpoints that follow their load", Holding): bounded in time
// (holdMs) and in count (holdMax per endpoint in this process), dropped at once when their caller
// leaves, and sent to the first replica that becomes ready. Held requests are counted as the
// endpoint's load (ProxyLoad): they are what wakes and scales it. A request whose replicas could
// not be reached before any answer byte (a machine preempted or gone between two probes) comes
// back here rather than answering 502, passing those replicas over, while a replica is coming.

/** What a caller is told to wait before asking again: about one readiness probe. */
export const RETRY_AFTER_SECONDS = 10;

/** How often an endpoint with held requests asks the directory again (which caches about a second). */
export const HOLD_POLL_MS = 250;

export interface HoldOptions {
  directory: EndpointDirectory;
  holdMs: number;
  holdMax: number;
  maxBodyBytes: number;
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
}

/** What a request sent back by `requeue` answers when nothing else is coming: the replica's failure. */
export interface Unreached {
  instanceIds: string[];
  detail: string;
}

interface Entry extends Held {
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
      for (const name of [...this.queues.keys()]) this.endAll(name, 503, "the service is stopping");
    });
  }

  /** Requests held for `name` in this process now. */
  waiting(name: string): number {
    return this.queues.get(name)?.entries.length ?? 0;
  }

  /** Holds the request, or answers 503 at once when the queue is full or the service stops. */
  hold(req: NodeRequest, res: NodeResponse, name: string, path: string, route: EndpointRoute): void {
    const refusal = this.refusal(name);
    if (refusal !== undefined) return refuse(res, this.options.metrics, name, refusal);
    // Read while held: the upload must end within HTTP_REQUEST_TIMEOUT_MS, whatever the wait.
    const body = new KeptBody(req, this.options.maxBodyBytes, () => this.onOverflow(entry));
    const entry = this.enqueue({ req, res, name, endpointId: route.endpointId, path, body });
  }

  /**
   * Holds again a request whose replicas (`unreached`) could not be reached before any answer
   * byte, its body kept: it goes to another replica that is or becomes ready, passing those over
   * for SHUN_MS; with nothing coming it answers 502 naming them. False (nothing done) when it
   * cannot wait: the queue is full, the service stops, or holding is off.
   */
  requeue(held: Held, unreached: Unreached): boolean {
    if (this.refusal(held.name) !== undefined || !held.body.replayable) return false;
    const until = Date.now() + SHUN_MS;
    const entry = this.enqueue(held, { avoid: new Map(unreached.instanceIds.map((id) => [id, until])), unreached });
    held.body.onOverflow = () => this.onOverflow(entry);
    return true;
  }

  /** Why a request cannot wait here now, or undefined. */
  private refusal(name: string): string | undefined {
    if (this.options.shutdown?.aborted) return "the service is stopping";
    if (this.options.holdMs === 0) return refusalDetail(name, undefined);
    if (this.waiting(name) >= this.options.holdMax) {
      return `endpoint '${name}' has no ready replica, and ${this.waiting(name)} requests already wait for one here (GPU_ENDPOINT_HOLD_MAX)`;
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
    const entry: Entry = {
      ...held,
      ...extra,
      since: process.hrtime.bigint(),
      timer: setTimeout(() => {
        if (this.leave(entry)) refuse(res, metrics, name, `no replica of endpoint '${name}' became ready within ${holdMs} ms`);
      }, holdMs),
      onClose: () => {
        // The caller left: dropped at once, no count left behind.
        if (this.leave(entry)) metrics.answered(name, 499);
      },
    };
    res.once("close", entry.onClose);
    queue.entries.push(entry);
    this.options.load.held(entry.endpointId, 1);
    this.schedule(name, queue);
    return entry;
  }

  private onOverflow(entry: Entry): void {
    if (!this.leave(entry)) return;
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
    if (route === undefined) this.endAll(name, 404, `endpoint '${name}' not found`);
    else if (route !== null) {
      this.release(name, route);
      if (!route.coming) this.endAll(name, 503, refusalDetail(name, route.refusal), true);
    }
    if (queue.entries.length > 0) this.schedule(name, queue);
    else if (this.queues.get(name) === queue) this.queues.delete(name);
  }

  /** Answers every request held for `name`; with `nothingComing`, a requeued one its replicas' failure. */
  private endAll(name: string, status: number, detail: string, nothingComing = false): void {
    const queue = this.queues.get(name);
    if (queue === undefined) return;
    for (const entry of [...queue.entries]) {
      if (!this.leave(entry)) continue;
      if (nothingComing && entry.unreached !== undefined) {
        this.options.metrics.answered(name, 502);
        sendJson(entry.res, 502, { detail: entry.unreached.detail }, { "x-endpoint-instance": entry.unreached.instanceIds.at(-1)! });
      } else if (status === 503) refuse(entry.res, this.options.metrics, name, detail);
      else sendJson(entry.res, status, { detail });
    }
  }

  /** Takes the entry out of its queue; false when it already was (each way out runs once). */
  private leave(entry: Entry): boolean {
    const queue = this.queues.get(entry.name);
    const index = queue?.entries.indexOf(entry) ?? -1;
    if (queue === undefined || index < 0) return false;
    queue.entries.splice(index, 1);
    clearTimeout(entry.timer);
    entry.res.off("close", entry.onClose);
    this.options.load.held(entry.endpointId, -1);
    this.options.metrics.held(entry.name, Number(process.hrtime.bigint() - entry.since) / 1e9);
    if (queue.entries.length === 0 && queue.poll !== undefined) {
      clearTimeout(queue.poll);
      this.queues.delete(entry.name);
    }
    return true;
  }
}

/** 503 with Retry-After: the caller may come back; counted per endpoint. */
export function refuse(res: NodeResponse, metrics: ProxyMetrics, name: string, detail: string): void {
  metrics.answered(name, 503);
  sendJson(res, 503, { detail }, { "retry-after": String(RETRY_AFTER_SECONDS) });
}
