import type http from "node:http";
import { PassThrough, type Readable } from "node:stream";
import type { Logger } from "pino";
import { ENDPOINT_PREFIX_DEFAULTS } from "../../config.js";
import type { EndpointDirectory, EndpointRoute, ProxyLoad, RouteTarget } from "../../module.js";
import type { PrefixIndexOptions } from "../prefix-index/prefix-index.js";
import type { BlockHashes } from "../prefix-index/prompt-blocks.js";
import type { NodeRequest, NodeResponse } from "../node-http.js";
import { sendRefusalBody } from "./refusal-body.js";
import type { AllowanceRefusal, CallerAllowance, RequestAsk } from "./caller-allowance.js";
import { NO_USAGE, USAGE_ANSWER_BYTES, wholeAnswerUsage, type AnswerUsage } from "./answer-usage.js";
import { readCompletion } from "./completion-body.js";
import { downstreamHeaders, upstreamHeaders } from "./forward-headers.js";
import { closeUnread, HoldQueues, RETRY_AFTER_SECONDS, refusalDetail, refuse, type Held } from "./hold-queue.js";
import { KeptBody, KeptBytes } from "./kept-body.js";
import type { ProxyMetrics } from "./proxy-metrics.js";
import { createProxyLoad } from "./proxy-load.js";
import { ReplicaBalancer } from "./replica-balancer.js";
import { ReplicaChoice } from "./replica-choice.js";
import { requestReplica, type ReplicaAnswer, type ReplicaHop, type ReplicaRequest } from "./replica-request.js";
import { completionPathOf, StreamedAnswer, type StreamPlan } from "./streamed-answer.js";

// The endpoint proxy (SPEC.md section 2, "Endpoints", Routing): one request to one ready replica.
// A request's path, in order: authenticated (before it reaches here, server/app.ts), admitted
// (its key's limits, caller-allowance.ts: once its body is read, or before it waits in the hold
// queue; refused, 429 and no replica asked; admitted, in flight for its caller until its response
// closes), a replica chosen (replica-choice.ts: the longest
// prefix of its prompt or the least outstanding), forwarded, settled (count(): once, whatever the
// end). The answer is passed on as it arrives, never buffered; a connection error or a
// 502/503/504 before any answer byte sends it to another ready replica it has not tried. With no
// ready replica while one is coming, the request waits in the hold queue (hold-queue.ts), and so
// does one whose every ready replica failed it before any answer byte (preempted between two
// probes): 502 only when nothing is coming. A streamed completion is read as it passes
// (streamed-answer.ts), so that a replica that fails mid-answer is replaced by another that
// continues it; every other answer is piped untouched. docs/endpoints.md tells the rules an
// operator sees.

export interface EndpointProxyOptions {
  directory: EndpointDirectory;
  /** Request bodies up to this size are kept for a retry; a larger one is answered 413. */
  maxBodyBytes: number;
  /** The longest wait for a replica's answer headers, ms; past it the caller gets 504. */
  firstByteMs: number;
  metrics: ProxyMetrics;
  logger: Logger;
  /** How long a request may wait for a replica to become ready, ms (GPU_ENDPOINT_HOLD_MS); 0: never held. */
  holdMs: number;
  /** How many requests may wait per endpoint in this process (GPU_ENDPOINT_HOLD_MAX). */
  holdMax: number;
  /** Where the requests in flight and held are counted for the load publisher; a count of its own without. */
  load?: ProxyLoad;
  /** The bytes of bodies kept for holding and retries in this process, bounded; a default bound of its own without. */
  kept?: KeptBytes;
  /** Aborted when the service stops: held requests are answered 503 at once. */
  shutdown?: AbortSignal;
  /** A started stream silent this long is taken for cut, ms (GPU_ENDPOINT_STALL_MS). */
  stallMs: number;
  /** Continuations of one streamed answer (GPU_ENDPOINT_RESUME_MAX). */
  resumeMax: number;
  /** The prefix index's bounds (GPU_ENDPOINT_PREFIX_TTL_MS, GPU_ENDPOINT_PREFIX_MAX_BLOCKS); their defaults without. */
  prefixIndex?: PrefixIndexOptions;
  /** Told of every answer that reached a replica's exchange when it ends: who, its status, what it used. */
  settle?: (answer: SettledAnswer) => void;
}

/** One answer at its end, for its caller's usage. */
export interface SettledAnswer {
  endpoint: string;
  caller: string;
  /** The status counted for it (499: the caller left). */
  status: number;
  usage: AnswerUsage;
}

export interface EndpointProxy {
  /**
   * Serves one request already authorized, for `name`, asking the replica for `upstreamPath`;
   * `caller` is who calls (the actor: a token's or key's name), for its usage; `allowance` its
   * limits on this request (a key with limits), admitted once and settled once.
   * The pools' idle connections hold no process open (undici unrefs them): no close needed.
   */
  handle(req: NodeRequest, res: NodeResponse, name: string, caller: string, upstreamPath: string, allowance?: CallerAllowance): void;
}

export { CONNECT_TIMEOUT_MS } from "./replica-request.js";

/** At most one log line this often for requests the endpoint directory failed. */
const DIRECTORY_ERROR_LOG_MS = 10_000;

/** Answers that say "this replica cannot take it", not "this request is wrong". */
const RETRYABLE_STATUS = new Set([502, 503, 504]);

export function createEndpointProxy(options: EndpointProxyOptions): EndpointProxy {
  const { directory, maxBodyBytes, logger, metrics } = options;
  const load = options.load ?? createProxyLoad();
  const kept = options.kept ?? new KeptBytes();
  const holds = new HoldQueues({
    directory,
    holdMs: options.holdMs,
    holdMax: options.holdMax,
    maxBodyBytes,
    kept,
    load,
    metrics,
    logger,
    shutdown: options.shutdown,
    // The first-byte clock (and metric) of a held request starts here: its wait is gpu_endpoint_hold_seconds.
    dispatch: (held: Held, route: EndpointRoute) =>
      new Exchange(shared, held.req, held.res, held.name, held.caller, route, held.path, process.hrtime.bigint(), held.allowance, held).start(),
  });
  const balancer = new ReplicaBalancer();
  const choice = new ReplicaChoice(balancer, metrics, options.prefixIndex ?? ENDPOINT_PREFIX_DEFAULTS);
  const shared: Shared = { balancer, choice, options, addresses: new Map(), load, kept, holds };

  // With the database away every request fails alike: one line per DIRECTORY_ERROR_LOG_MS says so, and how many.
  let failedSinceLine = 0;
  let lineAt = -Infinity;
  const directoryFailed = (err: unknown, name: string): void => {
    failedSinceLine += 1;
    if (performance.now() - lineAt < DIRECTORY_ERROR_LOG_MS) return;
    logger.error({ err, endpoint: name, requests: failedSinceLine }, "endpoint directory failed: requests answered 503");
    lineAt = performance.now();
    failedSinceLine = 0;
  };

  const handle = async (req: NodeRequest, res: NodeResponse, name: string, caller: string, upstreamPath: string, allowance?: CallerAllowance): Promise<void> => {
    const started = process.hrtime.bigint();
    if (Number(req.headers["content-length"] ?? 0) > maxBodyBytes) {
      sendRefusalBody(res, 413, `request body exceeds ${maxBodyBytes} bytes`, closeUnread(req, res));
      return;
    }
    // The directory may take a while (a database under load): a caller can leave meanwhile, and
    // its response's 'close' is then over before any Exchange listens for it.
    let left = false;
    const onLeft = () => (left = true);
    res.once("close", onLeft);
    let route: EndpointRoute | undefined;
    try {
      route = await directory.route(name);
    } catch (err) {
      directoryFailed(err, name);
      sendRefusalBody(res, 503, "endpoint routing is unavailable", { "retry-after": String(RETRY_AFTER_SECONDS), ...closeUnread(req, res) }, { code: "routing_unavailable" });
      return;
    } finally {
      res.off("close", onLeft);
    }
    if (left) {
      // No replica is asked for nobody; counted as any caller that leaves (a known name only).
      if (route !== undefined) metrics.answered(name, 499);
      return;
    }
    // Unknown names are not counted per endpoint: the label would take any value a caller sends.
    if (route === undefined) {
      sendRefusalBody(res, 404, `endpoint '${name}' not found`);
      return;
    }
    load.arrived(route.endpointId);
    if (route.targets.length > 0) {
      // Requests held before this one go first (a replica just became ready): first in first out.
      holds.release(name, route);
      new Exchange(shared, req, res, name, caller, route, upstreamPath, started, allowance).start();
      return;
    }
    if (!route.coming) {
      refuse(res, metrics, name, { reason: "not_coming", detail: refusalDetail(name, route.refusal) }, req);
      return;
    }
    // A held request counts in its key's places: admitted before it waits (its body unread: the
    // declared length and the default hold), so that a refused one never waits.
    if (allowance !== undefined) {
      res.once("close", onLeft);
      const refusal = await allowance.admit({ bodyBytes: Number(req.headers["content-length"] ?? 0), completion: completionPathOf(req.method, upstreamPath) !== undefined });
      res.off("close", onLeft);
      if (refusal !== undefined) return refuseByLimit(res, metrics, name, refusal, req);
      if (left) {
        allowance.settle(NO_USAGE);
        metrics.answered(name, 499);
        return;
      }
    }
    countInFlight(load, res, route.endpointId, caller);
    holds.hold(req, res, name, caller, upstreamPath, route, allowance);
  };

  return {
    handle(req, res, name, caller, upstreamPath, allowance) {
      handle(req, res, name, caller, upstreamPath, allowance).catch((err: unknown) => {
        allowance?.settle(NO_USAGE);
        logger.error({ err, endpoint: name }, "endpoint proxy failed");
        sendRefusalBody(res, 500, "internal server error");
      });
    },
  };
}

interface Shared extends ReplicaHop {
  options: EndpointProxyOptions;
  kept: KeptBytes;
  /** Where a request whose replicas could not be reached waits again. */
  holds: HoldQueues;
  /** Which replica a request goes to first. */
  choice: ReplicaChoice;
}

/** One caller's request, from the first replica asked to the end of the answer. */
class Exchange {
  private readonly body: KeptBody;
  private attempt: ReplicaRequest | undefined;
  private target!: RouteTarget;
  /** The replicas that failed this request before any answer byte, here or before it was held again. */
  private readonly failed: string[];
  /** A fresh connection was tried after a reset on a reused one (which says nothing of the replica). */
  private reconnected = false;
  private answering = false;
  private settled = false;
  private finished = false;
  private counted = false;
  private timer: NodeJS.Timeout | undefined;
  /** A streamed completion: what it asks, sent in place of the caller's body. */
  private plan: StreamPlan | undefined;
  /** Its prompt's blocks, on an endpoint routed by prefix: a replica it is retried or continued on learns them too. */
  private blocks: BlockHashes | undefined;
  private streamed: StreamedAnswer | undefined;
  /** Bytes of the kept request counted while a streamed answer may be continued. */
  private keptForStream = 0;
  /** When the request was sent to its replica (performance.now() ms): a streamed answer's first event is due firstByteMs later. */
  private sentAt = 0;
  /** What the answer used, once known: settled with its count. */
  private usage: AnswerUsage = NO_USAGE;

  constructor(
    private readonly shared: Shared,
    private readonly req: NodeRequest,
    private readonly res: NodeResponse,
    private readonly name: string,
    private readonly caller: string,
    /** Its ready replicas, and whether another is coming, when it was sent. */
    private readonly route: EndpointRoute,
    private readonly path: string,
    private readonly started: bigint,
    /** Its caller's limits, if any: admitted before a replica is chosen, settled at count(). */
    private readonly allowance: CallerAllowance | undefined,
    /** The hold queue's request: its body read while it waited, and whether it may go back there. */
    private readonly held?: Held,
  ) {
    if (held === undefined) this.body = new KeptBody(req, shared.options.maxBodyBytes, shared.kept, () => this.onOverflow());
    else {
      this.body = held.body;
      this.body.onOverflow = () => this.onOverflow();
    }
    this.failed = [...(held?.failed ?? [])];
    res.once("finish", () => (this.finished = true));
    res.once("close", () => this.onClientClose());
  }

  start(): void {
    const first = (blocks?: BlockHashes) => {
      this.blocks = blocks;
      this.send(this.shared.choice.first(this.name, this.route, blocks));
    };
    const path = completionPathOf(this.req.method, this.path);
    // Only a completion is read: its body decides whether it streams, and its prompt where it goes.
    if (path === undefined || !this.body.replayable) return this.admitted({ bodyBytes: 0, completion: false }, () => first());
    // Its copy dropped while it arrives (it grew past what the process may still keep): nothing can
    // be sent, and the rest of it is not read.
    this.body.onUnkept = () => this.refuseUnkept();
    this.body.whenWhole((bytes) => {
      this.body.onUnkept = undefined;
      if (this.settled || this.body.overflowed) return;
      if (bytes === undefined) return this.refuseUnkept();
      const prefix = this.route.routing === "prefix";
      const { choice } = this.shared;
      const completion = readCompletion(path, bytes, { promptBlocks: prefix ? choice.maxBlocks : undefined, recentMessages: prefix ? choice.recentMessages : undefined, maxTokens: this.allowance !== undefined });
      this.plan = completion.plan;
      this.admitted({ bodyBytes: bytes.length, maxTokens: completion.maxTokens, completion: true }, () => first(completion.blocks));
    });
  }

  /** The request's one admission against its caller's limits, then `go`; refused: 429, no replica asked. */
  private admitted(ask: RequestAsk, go: () => void): void {
    if (this.allowance === undefined) return this.inFlight(go);
    this.allowance.admit(ask).then(
      (refusal) => {
        // The caller left meanwhile: counted (and settled) by onClientClose.
        if (this.settled) return;
        if (refusal === undefined) return this.inFlight(go);
        this.settled = true;
        this.counted = true;
        this.body.detach();
        this.body.release();
        refuseByLimit(this.res, this.shared.options.metrics, this.name, refusal, this.req);
      },
      (err: unknown) => {
        this.shared.options.logger.error({ err, endpoint: this.name }, "key admission failed");
        this.reply(500, "internal server error");
      },
    );
  }

  /** Counts the answer in flight for its caller, then `go`; a request from the hold queue was counted before it waited. */
  private inFlight(go: () => void): void {
    if (this.held === undefined) countInFlight(this.shared.load, this.res, this.route.endpointId, this.caller);
    go();
  }

  private send(target: RouteTarget): void {
    this.target = target;
    const headers = upstreamHeaders(this.req.headers, target.apiKey);
    let body: Buffer | Readable | null;
    if (this.plan) {
      // Its own body (usage asked on every chunk), and an answer the reader can read as it comes.
      headers["content-length"] = String(this.plan.firstBytes.length);
      delete headers["accept-encoding"];
      body = this.plan.firstBytes;
    } else body = this.bodyToSend();
    const attempt = requestReplica(this.shared, this.route.endpointId, target, this.req.method, this.path, headers, body, {
      onResponse: (answer) => this.onResponse(attempt, answer),
      onError: (err, reused) => this.onUpstreamError(attempt, err, reused),
    });
    this.attempt = attempt;
    this.sentAt = performance.now();
    this.timer = setTimeout(() => this.onFirstByteTimeout(attempt), this.shared.options.firstByteMs);
  }

  /** The caller's body as the replica gets it: in one piece once it has all come, or passed on as it comes. */
  private bodyToSend(): Buffer | Readable | null {
    if (!hasBody(this.req)) return null;
    const whole = this.body.arrived();
    if (whole !== undefined) return whole;
    // undici destroys the body of a request that fails; the chunks that still come must not throw.
    const sink = new PassThrough().on("error", () => undefined);
    this.body.sendTo(sink);
    return sink;
  }

  private onResponse(attempt: ReplicaRequest, answer: ReplicaAnswer): void {
    // Another attempt's, or too late: its bytes are dropped as they come.
    if (attempt !== this.attempt || this.settled) return;
    clearTimeout(this.timer);
    const status = answer.status;
    if (RETRYABLE_STATUS.has(status)) {
      this.failedBy(this.target);
      if (this.retryTo(this.nextTarget(false))) return;
      if (this.requeue(`replica ${this.target.instanceId} answered ${status}`)) return;
    }
    this.answering = true;
    // No retry from here on: the kept copy of the body is of no more use.
    this.body.release();
    const streamed = this.plan !== undefined && status === 200 && String(answer.headers["content-type"] ?? "").includes("text/event-stream");
    if (!streamed) {
      // A streamed answer's first byte is its first event (streamed-answer.ts): its headers come before the model's first token.
      this.shared.options.metrics.firstByte(this.name, Number(process.hrtime.bigint() - this.started) / 1e9);
    }
    try {
      const limits = this.allowance?.headers() ?? {};
      (this.res as http.ServerResponse).writeHead(status, { ...downstreamHeaders(answer.headers, this.target.instanceId), ...limits });
    } catch (err) {
      // A header node:http took from the replica that the caller's protocol refuses (HTTP/2 is strict).
      this.shared.options.logger.warn({ err, endpoint: this.name, instance_id: this.target.instanceId }, "replica's answer headers refused");
      this.answering = false;
      this.reply(502, `replica ${this.target.instanceId} sent headers that cannot be passed on`);
      return;
    }
    if (streamed) this.readStream(attempt, answer);
    else this.passOn(status, answer);
  }

  /**
   * An answer passed on untouched: counted when it ends, taken for the replica's failure when it
   * is cut. A completion's answer is also kept (up to USAGE_ANSWER_BYTES) for its usage.
   */
  private passOn(status: number, answer: ReplicaAnswer): void {
    const res = this.res;
    const usage = status === 200 && completionPathOf(this.req.method, this.path) !== undefined ? new AnswerCopy() : undefined;
    res.once("finish", () => {
      if (usage !== undefined) this.usage = wholeAnswerUsage(usage.whole(), this.body.received);
      this.count(status);
    });
    const resume = () => answer.resume();
    answer.read(
      (chunk) => {
        usage?.add(chunk);
        if (res.write(chunk)) return;
        answer.pause();
        res.once("drain", resume);
      },
      (complete) => this.passedOn(complete),
    );
  }

  private passedOn(complete: boolean): void {
    if (complete) {
      this.res.end();
      return;
    }
    // Dropped because the caller left (onClientClose): nothing was cut by the replica.
    if (this.res.writableEnded || this.settled) return;
    this.shared.options.logger.warn({ endpoint: this.name, instance_id: this.target.instanceId }, "replica's answer cut off");
    // Counted as the replica's failure (502, as when it cannot be reached), before the caller's
    // side closes: that close would otherwise count the caller as having left (499).
    this.settled = true;
    this.count(502);
    this.res.destroy();
  }

  /**
   * A streamed completion, read as it passes so that another replica can continue it if this one
   * fails mid-answer. Its request stays kept for that (counted in the process's kept bytes); with
   * no room there it is passed on without continuation.
   */
  private readStream(attempt: ReplicaRequest, answer: ReplicaAnswer): void {
    const plan = this.plan!;
    const { options, kept } = this.shared;
    if (plan.resumable.resumable) {
      if (kept.take(plan.firstBytes.length)) this.keptForStream = plan.firstBytes.length;
      else plan.resumable = { resumable: false, reason: "this process keeps all the request bodies it may (GPU_ENDPOINT_KEPT_BODY_BYTES)" };
    }
    this.streamed = new StreamedAnswer({
      res: this.res,
      name: this.name,
      endpointId: this.route.endpointId,
      upstreamPath: this.path,
      callerHeaders: this.req.headers,
      plan,
      hop: this.shared,
      directory: options.directory,
      holds: this.shared.holds,
      metrics: options.metrics,
      kept,
      logger: options.logger,
      started: this.started,
      stallMs: options.stallMs,
      resumeMax: options.resumeMax,
      firstByteMs: options.firstByteMs,
      bodyBytes: this.body.received,
      allowance: this.allowance,
      continuedOn: (target) => this.shared.choice.resent(this.route, target, this.blocks),
      onEnd: (status, usage) => {
        this.settled = true;
        this.releaseStreamKept();
        this.usage = usage;
        this.count(status);
      },
    });
    this.streamed.read(answer, this.target, attempt, this.sentAt);
  }

  private releaseStreamKept(): void {
    this.shared.kept.give(this.keptForStream);
    this.keptForStream = 0;
  }

  private onUpstreamError(attempt: ReplicaRequest, err: NodeJS.ErrnoException, reused: boolean): void {
    if (attempt !== this.attempt || this.settled || this.answering) return;
    clearTimeout(this.timer);
    if (!reused) this.shared.balancer.shun(this.target);
    this.failedBy(this.target);
    if (this.retryTo(this.nextTarget(reused))) return;
    this.shared.options.logger.warn({ endpoint: this.name, instance_id: this.target.instanceId, code: err.code }, "replica unreachable");
    const detail = `replica ${this.target.instanceId} could not be reached`;
    if (this.requeue(detail)) return;
    this.reply(502, detail);
  }

  private failedBy(target: RouteTarget): void {
    if (!this.failed.includes(target.instanceId)) this.failed.push(target.instanceId);
  }

  /**
   * Nothing was sent to the caller and the body is kept: the request waits in the hold queue for
   * a replica other than the ones that failed it, instead of answering 502.
   */
  private requeue(detail: string): boolean {
    // Nothing was coming when it was sent: the replica's failure is the answer, at once.
    if (!this.route.coming || !this.body.replayable) return false;
    this.body.detach();
    const held: Held = {
      req: this.req,
      res: this.res,
      name: this.name,
      caller: this.caller,
      endpointId: this.route.endpointId,
      path: this.path,
      body: this.body,
      heldSince: this.held?.heldSince,
      failed: this.failed,
      // Admitted once: settled by whichever way the request ends from the queue.
      allowance: this.allowance,
    };
    if (!this.shared.holds.requeue(held, { instanceIds: this.failed, detail })) return false;
    // This exchange is over without an answer: the one the hold queue starts answers.
    this.settled = true;
    this.counted = true;
    this.attempt?.destroy();
    return true;
  }

  private onFirstByteTimeout(attempt: ReplicaRequest): void {
    if (attempt !== this.attempt || this.settled) return;
    const { firstByteMs, logger } = this.shared.options;
    logger.warn({ endpoint: this.name, instance_id: this.target.instanceId, first_byte_ms: firstByteMs }, "replica sent no answer in time");
    this.reply(504, `replica ${this.target.instanceId} sent no answer within ${firstByteMs} ms`);
  }

  private onOverflow(): void {
    if (this.settled) return;
    if (this.answering) {
      this.res.destroy();
      return;
    }
    this.reply(413, `request body exceeds ${this.shared.options.maxBodyBytes} bytes`, closeUnread(this.req, this.res));
  }

  private onClientClose(): void {
    if (this.settled || this.finished) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.body.release();
    this.attempt?.destroy();
    this.streamed?.abort();
    this.releaseStreamKept();
    this.count(499);
  }

  /**
   * A ready replica that has not failed this request, or none. A connection reset on a reused
   * keep-alive connection says nothing about the replica (it closed an idle connection as the
   * request left), so with no other replica the same one is asked once more on a new connection.
   */
  private nextTarget(reusedSocket: boolean): RouteTarget | undefined {
    if (!this.body.replayable) return undefined;
    const next = this.shared.balancer.pick(this.route.targets.filter((target) => !this.failed.includes(target.instanceId)));
    if (next !== undefined || !reusedSocket || this.reconnected) return next;
    this.reconnected = true;
    return this.target;
  }

  private retryTo(next: RouteTarget | undefined): boolean {
    if (next === undefined) return false;
    this.shared.options.metrics.retried(this.name);
    this.shared.choice.resent(this.route, next, this.blocks);
    this.body.detach();
    // Abandoned before its answer: its error is no longer this exchange's.
    const abandoned = this.attempt;
    this.attempt = undefined;
    abandoned?.destroy();
    this.send(next);
    return true;
  }

  /** Its body grew past what the process may keep before it could be sent: 503, the rest unread. */
  private refuseUnkept(): void {
    if (this.settled) return;
    this.settled = true;
    this.count(503);
    this.shared.options.metrics.refused(this.name, "kept_bytes");
    const detail = "the request's body could not be kept (GPU_ENDPOINT_KEPT_BODY_BYTES)";
    sendRefusalBody(this.res, 503, detail, { "retry-after": String(RETRY_AFTER_SECONDS), ...closeUnread(this.req, this.res) }, { code: "kept_bytes" });
  }

  /** The proxy's own answer (no replica's): the caller learns which replica failed. */
  private reply(status: number, detail: string, headers: Record<string, string> = {}): void {
    this.settled = true;
    clearTimeout(this.timer);
    this.body.detach();
    this.body.release();
    this.attempt?.destroy();
    this.count(status);
    // No replica asked yet (a body refused before its send): none to name.
    const target = this.target as RouteTarget | undefined;
    sendRefusalBody(this.res, status, detail, { ...headers, ...(target ? { "x-endpoint-instance": target.instanceId } : {}) });
  }

  private count(code: number): void {
    if (this.counted) return;
    this.counted = true;
    this.shared.options.metrics.answered(this.name, code);
    // A caller gone mid-stream used what reached it so far.
    if (code === 499 && this.streamed !== undefined) this.usage = this.streamed.usage;
    this.allowance?.settle(this.usage);
    this.shared.options.settle?.({ endpoint: this.name, caller: this.caller, status: code, usage: this.usage });
  }
}

/**
 * An admitted answer counts in flight for its caller (its key's in_flight) from now until its
 * response closes, whichever way it ends: answered, refused while held, or its caller gone.
 */
function countInFlight(load: ProxyLoad, res: NodeResponse, endpointId: string, caller: string): void {
  load.callerAnswer(endpointId, caller, 1);
  res.once("close", () => load.callerAnswer(endpointId, caller, -1));
}

/** 429 for a caller's limit, in OpenAI's shape; the body not read yet is left unread. */
function refuseByLimit(res: NodeResponse, metrics: ProxyMetrics, name: string, refusal: AllowanceRefusal, req: NodeRequest): void {
  metrics.answered(name, 429);
  sendRefusalBody(res, 429, refusal.detail, { ...refusal.headers, ...closeUnread(req, res) }, { type: refusal.type, code: refusal.code });
}

/** A whole answer's bytes, up to USAGE_ANSWER_BYTES: past that none is kept. */
class AnswerCopy {
  private chunks: Buffer[] | undefined = [];
  private size = 0;

  add(chunk: Buffer): void {
    if (this.chunks === undefined) return;
    this.size += chunk.length;
    if (this.size > USAGE_ANSWER_BYTES) this.chunks = undefined;
    else this.chunks.push(chunk);
  }

  whole(): Buffer | undefined {
    return this.chunks === undefined ? undefined : Buffer.concat(this.chunks);
  }
}

/** Whether the caller's request carries a body to pass on (a GET's none: sent with no body at all). */
function hasBody(req: NodeRequest): boolean {
  const length = req.headers["content-length"];
  if (length !== undefined) return Number(length) > 0;
  if (req.httpVersionMajor === 1) return req.headers["transfer-encoding"] !== undefined;
  return !BODYLESS.has(req.method ?? "GET");
}

const BODYLESS = new Set(["GET", "HEAD", "DELETE", "OPTIONS"]);
