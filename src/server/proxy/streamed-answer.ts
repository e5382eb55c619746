import type { Logger } from "pino";
import type { EndpointDirectory, RouteTarget } from "../../module.js";
import type { NodeResponse } from "../node-http.js";
import { upstreamHeaders } from "./forward-headers.js";
import type { HoldQueues } from "./hold-queue.js";
import type { KeptBytes } from "./kept-body.js";
import type { CutReason, ProxyMetrics } from "./proxy-metrics.js";
import { requestReplica, type ReplicaAnswer, type ReplicaHop, type ReplicaRequest } from "./replica-request.js";
import { streamedUsage, type AnswerUsage } from "./answer-usage.js";
import type { AllowanceRefusal, CallerAllowance } from "./caller-allowance.js";
import { AnswerReader } from "./continuation/stream-reader.js";
import { continuationRequest, firstRequest, resumability, type CompletionPath, type FirstRequest, type Resumability } from "./continuation/continuation-request.js";

// One streamed completion on its way to the caller (SPEC.md section 2, "Answers that survive
// their replica"): every replica's bytes go through the answer's reader (continuation/), and only
// what it returns reaches the caller. A replica that fails after its headers (its answer ends
// before `data: [DONE]`, it sends an error event, it sends no event within firstByteMs of the
// request, or nothing for stallMs once its first event came; an opening role chunk sent before the
// first token is not that event) is replaced mid-answer: the
// continuation request (the text so far, the tokens that remain) goes to another ready replica,
// waiting for one in the endpoint's hold queue while one is coming (its rules and limits; an SSE
// comment every 10 s keeps the caller's connection alive), at most resumeMax times. An answer that
// cannot be continued ends with one error event and no [DONE]; one whose every choice had
// finished is finished here. The text so far and a continuation's body count in the process's
// kept bytes, as request bodies do.

/** What the proxy knows of a streamed completion before it is sent. */
export interface StreamPlan {
  path: CompletionPath;
  first: FirstRequest;
  /** The first request as the replica gets it. */
  firstBytes: Buffer;
  resumable: Resumability;
}

/** The completion a request asks for, if it may be streamed: POST /v1/chat/completions or /v1/completions. */
export function completionPathOf(method: string | undefined, upstreamPath: string): CompletionPath | undefined {
  if (method !== "POST") return undefined;
  const path = upstreamPath.split("?", 1)[0];
  return path === "/v1/chat/completions" ? "chat" : path === "/v1/completions" ? "completions" : undefined;
}

/** The plan of a streamed completion from its parsed body; undefined for one not streamed (passed on untouched). */
export function streamPlanOf(path: CompletionPath, caller: Record<string, unknown>): StreamPlan | undefined {
  if (caller.stream !== true) return undefined;
  const first = firstRequest(caller);
  return { path, first, firstBytes: Buffer.from(JSON.stringify(first.body)), resumable: resumability(path, caller) };
}

export interface StreamedAnswerOptions {
  res: NodeResponse;
  name: string;
  endpointId: string;
  upstreamPath: string;
  /** The caller's request headers (its Authorization is never forwarded). */
  callerHeaders: NodeJS.Dict<string | string[]>;
  plan: StreamPlan;
  hop: ReplicaHop;
  directory: EndpointDirectory;
  /** Where a continuation waits when no other replica is ready. */
  holds: HoldQueues;
  metrics: ProxyMetrics;
  /** The process's kept bytes (GPU_ENDPOINT_KEPT_BODY_BYTES): the text so far and continuation bodies count there. */
  kept: KeptBytes;
  logger: Logger;
  /** When the caller's request came (process.hrtime.bigint()): the first-byte metric counts from there to the first event. */
  started: bigint;
  stallMs: number;
  resumeMax: number;
  firstByteMs: number;
  /** The caller's request body's bytes: its prompt's estimate when no replica counted it. */
  bodyBytes: number;
  /** Its caller's limits, admitted: told what the answer used at each event past its hold, and may end it. */
  allowance?: Pick<CallerAllowance, "used" | "signal">;
  /** A continuation was sent to `target` (replica-choice.ts: that replica holds the prompt now). */
  continuedOn?: (target: RouteTarget) => void;
  /** The caller's answer is over: its status for the request metric (200 whole, 502 ended with an error, 429 its limit), and what it used. */
  onEnd(status: number, usage: AnswerUsage): void;
}

/** How often a caller whose answer waits for a replica hears that it is still alive. */
export const WAITING_COMMENT_MS = 10_000;

export class StreamedAnswer {
  private readonly reader: AnswerReader;
  private answer: ReplicaAnswer | undefined;
  private request: ReplicaRequest | undefined;
  private target!: RouteTarget;
  /** Replicas that failed this answer: a continuation goes elsewhere. */
  private readonly failed: string[] = [];
  private resumes = 0;
  private cutAt: number | undefined;
  /** The last cut: which replica, and why (named in an error event that ends the answer later). */
  private lastCut = { replica: "", why: "" };
  /** The first-event timer until the replica's first event, the stall timer after. */
  private stall: NodeJS.Timeout | undefined;
  /** When the current replica's request was sent (performance.now() ms): its first event is due firstByteMs later. */
  private sentAt = 0;
  /** The caller's first event was measured (gpu_endpoint_first_byte_seconds). */
  private firstEventMeasured = false;
  /** Bytes counted in the kept bytes: the text so far, and the continuation body in flight. */
  private keptText = 0;
  private keptContinuation = 0;
  /** When the replica last sent a byte (performance.now() ms): the stall timer looks at it when it fires. */
  private lastDataAt = 0;
  /** While the continuation waits in the hold queue: how to take it out, and the keep-alive comments. */
  private unhold: (() => void) | undefined;
  private comments: NodeJS.Timeout | undefined;
  private over = false;
  /** The caller's allowance behind this answer lapsed: it ends at once. */
  private readonly onLapse = () => this.limitReached({ detail: "the key's allowance could not be renewed", type: "rate_limit_exceeded", code: "allowance_lapsed" });

  constructor(private readonly o: StreamedAnswerOptions) {
    this.reader = new AnswerReader({ path: o.plan.path, usage: o.plan.first.usage, choices: o.plan.first.choices });
    // No continuation will need the text: it is not kept.
    if (!o.plan.resumable.resumable) this.reader.dropText();
    o.allowance?.signal.addEventListener("abort", this.onLapse, { once: true });
  }

  /**
   * Reads a replica's answer (the first, or a continuation's) to the caller, its request sent at
   * `sentAt` (performance.now() ms): until its first event the first-byte limit holds, from then the stall clock.
   */
  read(answer: ReplicaAnswer, target: RouteTarget, request: ReplicaRequest, sentAt: number): void {
    this.answer = answer;
    this.request = request;
    this.target = target;
    this.sentAt = sentAt;
    this.reader.startReplica();
    this.awaitFirstEvent();
    answer.read(
      (chunk) => this.onData(answer, chunk),
      () => {
        if (answer === this.answer && !this.over) this.cut(this.reader.done ? undefined : "its connection ended before the answer did");
      },
    );
  }

  /** What the answer used as the caller received it, so far. */
  get usage(): AnswerUsage {
    return streamedUsage(this.reader, this.o.bodyBytes);
  }

  /** The caller left: nothing more is asked of any replica. */
  abort(): void {
    this.stop();
    this.request?.destroy();
  }

  private onData(answer: ReplicaAnswer, chunk: Buffer): void {
    if (answer !== this.answer || this.over) return;
    this.lastDataAt = performance.now();
    const started = this.reader.started;
    const out = this.reader.push(chunk);
    if (!started && this.reader.started) this.onFirstEvent();
    this.keepText();
    if (out.length > 0) {
      if (this.cutAt !== undefined && this.reader.tokens > 0) {
        this.o.metrics.resumed(this.o.name, (performance.now() - this.cutAt) / 1000);
        this.cutAt = undefined;
      }
      if (!this.o.res.write(out) && !this.reader.done) {
        // Held back for a slow caller: the replica's silence meanwhile is ours, not a stall.
        clearTimeout(this.stall);
        answer.pause();
        this.o.res.once("drain", () => {
          if (answer !== this.answer || this.over) return;
          if (this.reader.started) this.armStall();
          else this.awaitFirstEvent();
          answer.resume();
        });
      }
    }
    if (this.reader.error !== undefined) return this.cut(`it sent an error event: ${JSON.stringify(this.reader.error)}`);
    if (this.reader.done) return this.end(200);
    if (out.length > 0 && this.o.allowance !== undefined) this.takeMore(answer, this.o.allowance);
  }

  /** Past its hold, each event takes what it used from the caller's allowance; refused, the answer ends. */
  private takeMore(answer: ReplicaAnswer, allowance: Pick<CallerAllowance, "used">): void {
    const verdict = allowance.used(this.usage);
    if (!(verdict instanceof Promise)) {
      if (verdict !== undefined) this.limitReached(verdict);
      return;
    }
    // Waiting for the allowance's renewal: no more of the answer meanwhile.
    clearTimeout(this.stall);
    answer.pause();
    void verdict.then((refusal) => {
      if (answer !== this.answer || this.over) return;
      if (refusal !== undefined) return this.limitReached(refusal);
      this.armStall();
      answer.resume();
    });
  }

  /** The caller's limit ends the answer: one error event in OpenAI's shape, and no [DONE]. */
  private limitReached(refusal: Pick<AllowanceRefusal, "detail" | "type" | "code">): void {
    if (this.over) return;
    const request = this.request;
    this.o.res.write(`data: ${JSON.stringify({ error: { message: refusal.detail, type: refusal.type, code: refusal.code } })}\n\n`);
    this.end(429);
    // Nothing more is asked of the replica.
    request?.destroy();
  }

  /** The replica's first event: the stall clock starts, and the caller's first event is measured. */
  private onFirstEvent(): void {
    this.armStall();
    if (this.firstEventMeasured) return;
    this.firstEventMeasured = true;
    this.o.metrics.firstByte(this.o.name, Number(process.hrtime.bigint() - this.o.started) / 1e9);
  }

  /** Counts the text so far in the kept bytes; with no room there, the answer will not be continued. */
  private keepText(): void {
    const grown = this.reader.textBytes - this.keptText;
    if (grown <= 0) return;
    if (this.o.kept.take(grown)) {
      this.keptText += grown;
      return;
    }
    this.o.kept.give(this.keptText);
    this.keptText = 0;
    this.reader.dropText();
    this.o.plan.resumable = { resumable: false, reason: KEPT_FULL };
  }

  /** The replica failed this answer (or, with no reason, its answer ended whole). */
  private cut(why: string | undefined): void {
    clearTimeout(this.stall);
    if (this.over) return;
    if (why === undefined || this.reader.done) return this.end(200);
    // This replica is done with: the 'close' or 'error' that destroying its request brings (after
    // a stall, a first-byte timeout) is not a second cut, of the replica continuing it by then.
    const request = this.request;
    this.answer = undefined;
    this.request = undefined;
    request?.destroy();
    const replica = this.target.instanceId;
    this.failed.push(replica);
    this.lastCut = { replica, why };
    this.releaseContinuation();
    this.o.logger.warn({ endpoint: this.o.name, instance_id: replica, tokens: this.reader.tokens }, `replica's streamed answer cut: ${why}`);
    if (this.reader.finished) {
      // Every choice had ended: only [DONE] was missing.
      this.o.res.write(this.reader.finish());
      return this.end(200);
    }
    const { plan } = this.o;
    if (!plan.resumable.resumable) return this.fail("not_resumable", `replica ${replica} failed mid-answer (${why}), and this answer cannot be continued: ${plan.resumable.reason}`);
    if (!this.reader.tokensCounted || this.reader.unreadable > 0) {
      return this.fail("not_resumable", `replica ${replica} failed mid-answer (${why}), and did not count the tokens it sent`);
    }
    const choice = this.reader.choices[0];
    if (choice !== undefined && choice.reasoned && choice.text === "") {
      // The reasoning so far cannot be handed to another replica (see docs/endpoints.md): it would think again.
      return this.fail("not_resumable", `replica ${replica} failed mid-answer (${why}), while the model was still reasoning: a continuation would reason again`);
    }
    if (this.resumes >= this.o.resumeMax) return this.fail("limit", `replica ${replica} failed mid-answer (${why}), after ${this.resumes} continuation(s) (GPU_ENDPOINT_RESUME_MAX)`);
    const next = continuationRequest(plan.path, plan.first.body, choice?.text ?? "", this.reader.tokens);
    if (next.finished) {
      this.o.res.write(this.reader.finish());
      return this.end(200);
    }
    const body = Buffer.from(JSON.stringify(next.body));
    if (!this.o.kept.take(body.length)) return this.fail("not_resumable", `replica ${replica} failed mid-answer (${why}), and its continuation cannot be kept: ${KEPT_FULL}`);
    this.keptContinuation = body.length;
    this.cutAt ??= performance.now();
    void this.continueOn(body, why, this.cutAt);
  }

  /** Sends the continuation to a ready replica that has not failed this answer, waiting for one in the hold queue while one is coming. */
  private async continueOn(body: Buffer, why: string, since: number): Promise<void> {
    const route = await this.o.directory.route(this.o.name).catch(() => null);
    if (this.over) return;
    const replica = this.failed.at(-1);
    const target = this.o.hop.balancer.pick(route?.targets.filter((t) => !this.failed.includes(t.instanceId)) ?? []);
    if (target !== undefined) return this.send(target, body);
    // Unknown endpoint, deleting, parked, or nothing coming: nobody can continue it.
    if (route === undefined) return this.fail("no_replica", `replica ${replica} failed mid-answer (${why}), and its endpoint no longer exists`);
    if (route !== null && !route.coming) return this.fail("no_replica", `replica ${replica} failed mid-answer (${why}), and no other replica is ready or coming`);
    this.unhold = this.o.holds.holdContinuation({
      name: this.o.name,
      endpointId: this.o.endpointId,
      cutAt: since,
      failed: this.failed,
      resume: (ready) => {
        this.stopWaiting();
        if (!this.over) this.send(this.o.hop.balancer.pick(ready.targets)!, body);
      },
      giveUp: (detail) => {
        this.stopWaiting();
        this.fail("no_replica", `replica ${replica} failed mid-answer (${why}); ${detail}`);
      },
    });
    if (this.unhold !== undefined) this.comments = setInterval(() => this.o.res.write(": waiting for a replica\n\n"), WAITING_COMMENT_MS);
  }

  private stopWaiting(): void {
    this.unhold = undefined;
    clearInterval(this.comments);
  }

  private send(target: RouteTarget, body: Buffer): void {
    this.o.continuedOn?.(target);
    const headers = upstreamHeaders(this.o.callerHeaders, target.apiKey);
    delete headers["accept-encoding"];
    headers["content-length"] = String(body.length);
    headers["content-type"] = "application/json";
    const sentAt = performance.now();
    const request: ReplicaRequest = requestReplica(this.o.hop, this.o.endpointId, target, "POST", this.o.upstreamPath, headers, body, {
      onResponse: (answer) => this.onContinuation(request, answer, target, sentAt, firstByte),
      onError: () => {
        clearTimeout(firstByte);
        if (request === this.request && !this.over) this.cut("its continuation could not be sent");
      },
    });
    this.request = request;
    this.target = target;
    const firstByte = setTimeout(() => request.destroy(), this.o.firstByteMs);
  }

  /** A continuation's answer headers came. */
  private onContinuation(request: ReplicaRequest, answer: ReplicaAnswer, target: RouteTarget, sentAt: number, firstByte: NodeJS.Timeout): void {
    clearTimeout(firstByte);
    // Another replica's by now, or too late: its bytes are dropped as they come.
    if (this.over || request !== this.request) return;
    // Answered: the continuation's body is sent and no longer kept.
    this.releaseContinuation();
    const status = answer.status;
    if (status >= 400 && status < 500) return this.refused(answer, status);
    const type = String(answer.headers["content-type"] ?? "");
    if (status !== 200 || !type.includes("text/event-stream")) return this.cut(`its continuation was answered ${status}`);
    // A continuation counts once a replica answers it: one that could not be sent is tried elsewhere.
    this.resumes += 1;
    this.o.logger.info(
      { endpoint: this.o.name, answer_id: answerId(this.reader.id), from: this.failed.at(-1), to: target.instanceId, tokens: this.reader.tokens, continuation: this.resumes },
      "streamed answer continued on another replica",
    );
    this.read(answer, target, request, sentAt);
  }

  /**
   * A continuation answered 4xx: another replica would answer the same, so the answer ends now
   * with the error event naming the status and the replica's message.
   */
  private refused(answer: ReplicaAnswer, status: number): void {
    const request = this.request;
    const replica = this.target.instanceId;
    // Its message is read as it comes, no longer than a stall: a refusal that never ends ends here.
    const silence = setTimeout(() => request?.destroy(), this.o.stallMs);
    void readSome(answer, REFUSAL_BYTES).then((body) => {
      clearTimeout(silence);
      if (this.over || request !== this.request) return;
      const { replica: cut, why } = this.lastCut;
      this.fail("not_resumable", `replica ${cut} failed mid-answer (${why}), and replica ${replica} answered its continuation ${status}: ${refusalMessage(body)}`);
    });
  }

  /** Ends the caller's answer with one error event and no [DONE]: never a silent end that looks complete. */
  private fail(reason: CutReason, message: string): void {
    this.o.metrics.streamCut(this.o.name, reason);
    this.o.logger.warn({ endpoint: this.o.name, reason }, `streamed answer not continued: ${message}`);
    this.o.res.write(`data: ${JSON.stringify({ error: { message, type: "upstream_error", code: 502 } })}\n\n`);
    this.end(502);
  }

  private end(status: number): void {
    if (this.over) return;
    this.stop();
    // Held back for a slow caller when its [DONE] came: the rest of its answer (its end) is read,
    // or its connection would stay busy, counted in flight, until the replica's idle timeout.
    this.answer?.resume();
    this.o.res.end();
    this.o.onEnd(status, this.usage);
  }

  private stop(): void {
    this.over = true;
    this.o.allowance?.signal.removeEventListener("abort", this.onLapse);
    clearTimeout(this.stall);
    // A continuation that waits leaves the hold queue unanswered: it is no longer counted as held.
    this.unhold?.();
    this.stopWaiting();
    this.releaseContinuation();
    this.o.kept.give(this.keptText);
    this.keptText = 0;
  }

  private releaseContinuation(): void {
    this.o.kept.give(this.keptContinuation);
    this.keptContinuation = 0;
  }

  /**
   * Until the replica's first event: the first-byte limit, counted from its request. vLLM sends
   * its headers at once and its first event after queueing and prefill (other servers an opening
   * role chunk at once, then nothing until the first token): that wait is not a stall.
   */
  private awaitFirstEvent(): void {
    clearTimeout(this.stall);
    const answer = this.answer;
    this.stall = setTimeout(() => {
      if (answer === this.answer && !this.over) this.cut(`it sent no event within ${this.o.firstByteMs} ms (GPU_ENDPOINT_FIRST_BYTE_MS)`);
    }, Math.max(0, this.sentAt + this.o.firstByteMs - performance.now()));
  }

  /** Starts the replica's stall clock now. */
  private armStall(): void {
    clearTimeout(this.stall);
    this.lastDataAt = performance.now();
    this.stallIn(this.o.stallMs, this.answer);
  }

  // One timer per silence, not one per chunk: when it fires after bytes came, it waits for the rest.
  private stallIn(ms: number, answer: ReplicaAnswer | undefined): void {
    this.stall = setTimeout(() => {
      if (answer !== this.answer || this.over) return;
      const silent = performance.now() - this.lastDataAt;
      if (silent >= this.o.stallMs) this.cut(`it sent nothing for ${this.o.stallMs} ms`);
      else this.stallIn(this.o.stallMs - silent, answer);
    }, ms);
  }
}

const KEPT_FULL = "this process keeps all the request bodies it may (GPU_ENDPOINT_KEPT_BODY_BYTES)";

/** How much of a refused continuation's answer is read for its message. */
const REFUSAL_BYTES = 16 * 1024;

/** Up to `limit` bytes of an answer, the rest read and dropped. */
function readSome(answer: ReplicaAnswer, limit: number): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    answer.read(
      (chunk) => {
        if (size < limit) chunks.push(chunk);
        size += chunk.length;
      },
      () => resolve(Buffer.concat(chunks).subarray(0, limit).toString("utf8")),
    );
  });
}

/** The message of a replica's error answer: OpenAI's `error.message`, vLLM's `message`, FastAPI's `detail`, or its text. */
function refusalMessage(body: string): string {
  try {
    const json = JSON.parse(body) as { error?: unknown; message?: unknown; detail?: unknown };
    const error = typeof json.error === "object" && json.error !== null ? (json.error as { message?: unknown }).message : json.error;
    const message = error ?? json.message ?? json.detail;
    if (typeof message === "string" && message !== "") return message;
    if (message !== undefined) return JSON.stringify(message);
  } catch {
    // Not JSON: its text is the message.
  }
  const text = body.trim();
  return text === "" ? "(no message)" : text.length > 300 ? `${text.slice(0, 300)}...` : text;
}

/** The answer's id for a log line: the reader keeps it as the replica wrote it (a JSON string). */
function answerId(json: string | undefined): string | undefined {
  try {
    return json === undefined ? undefined : String(JSON.parse(json));
  } catch {
    return json;
  }
}
