import { errors, type Client } from "@elastic/elasticsearch";
import { IndexingError, isUnreachable } from "../indexing-error.js";
import { messageOf } from "../../errors.js";
import { BulkLines, type BulkAction } from "./bulk-lines.js";

// Sends items to Elasticsearch in bulk requests bounded by document count and by bytes, with at
// most `concurrency` requests in flight; the reading loop waits for a free slot, so a slow
// cluster pauses the source. An item is its NDJSON lines (an action line, and a document line for
// an index action) as bytes (bulk-lines.ts); runs of items are copied as they are into request
// bodies that are reused from bulk to bulk.
// Every item gets its own result: accepted ones go to onAccepted, 429s are retried with backoff,
// a 503 (a shard unavailable) fails the run, anything else goes to onDrop and is counted, never
// lost silently. A delete answered 404 is done (counted as missing). An item with an external
// version answered 409 is done too: a newer state of the document is already there (counted as
// superseded).

export type { BulkAction } from "./bulk-lines.js";

export interface BulkFailure {
  readonly status: number;
  readonly type: string;
  readonly reason: string;
}

export interface BulkStats {
  total: number;
  successful: number;
  failed: number;
  /** Deletes answered 404 (the document was not there); also counted in successful. */
  missing: number;
  /** Versioned items answered 409 (a newer version is there); also counted in successful. */
  superseded: number;
  retried: number;
  bytes: number;
  bulks: number;
}

export interface BulkSenderOptions {
  client: Client;
  index: string;
  /** Refuse to write unless `index` is an alias (a deleted target is never re-created by a write). */
  requireAlias?: boolean;
  bulkSize: number;
  maxBytes: number;
  concurrency: number;
  /** Retries of a document answered 429 before it counts as failed. */
  retries?: number;
  /** First backoff after a 429; doubled on every further attempt. */
  retryDelayMs?: number;
  /**
   * The actions of the items accepted, read back from the body only when this is given. Awaited
   * before the bulk's slot is freed, so slow bookkeeping also slows the reader.
   */
  onAccepted?: (actions: BulkAction[]) => Promise<void>;
  onDrop?: (action: BulkAction, failure: BulkFailure) => void;
  /** Called after each bulk request has settled. */
  onBulkSettled?: (stats: Readonly<BulkStats>) => Promise<void> | void;
  signal?: AbortSignal;
  /** Live statistics, updated as bulks settle; created when not given. */
  stats?: BulkStats;
}

export function emptyBulkStats(): BulkStats {
  return { total: 0, successful: 0, failed: 0, missing: 0, superseded: 0, retried: 0, bytes: 0, bulks: 0 };
}

export async function sendBulks(source: AsyncIterable<BulkLines>, options: BulkSenderOptions): Promise<BulkStats> {
  const { bulkSize, maxBytes, concurrency, signal } = options;
  const stats = options.stats ?? emptyBulkStats();
  const inFlight = new Set<Promise<void>>();
  // A body is reused once its request has settled: at most concurrency + 1 exist.
  const spare: BulkLines[] = [];
  const takeBody = () => spare.pop() ?? new BulkLines(bulkSize);
  let failure: unknown;
  let body = takeBody();

  const dispatch = async () => {
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
    const full = body;
    body = takeBody();
    const request = sendWithRetries(full, options, stats)
      .catch((err: unknown) => {
        failure ??= err;
      })
      .finally(() => {
        full.clear();
        spare.push(full);
      });
    const tracked = request.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
  };
  const stopped = () => failure !== undefined || signal?.aborted === true;

  for await (const batch of source) {
    if (stopped()) break;
    for (let next = 0; next < batch.count && !stopped(); ) {
      // As many items as the body has room for, by count and by bytes, copied in one go.
      let end = next;
      const room = maxBytes - body.byteLength;
      while (end < batch.count && body.count + end - next < bulkSize && batch.bytesOf(next, end + 1) <= room) end++;
      // An item larger than the byte bound goes alone.
      if (end === next && body.count === 0) end++;
      body.appendItems(batch, next, end);
      stats.total += end - next;
      next = end;
      if (body.count >= bulkSize || next < batch.count) await dispatch();
    }
  }
  if (body.count > 0 && !stopped()) await dispatch();
  await Promise.all(inFlight);
  if (failure !== undefined) throw failure;
  return stats;
}

/**
 * Only what the per-item bookkeeping reads: each item's status (its position matches the request
 * line) and, for failures, the error. The full answer repeats index, _id, version and shards for
 * every document, which the cluster serialises and this process parses for nothing.
 */
export const BULK_RESULT_FIELDS = ["errors", "items.*.status", "items.*.error.type", "items.*.error.reason"];

async function sendWithRetries(body: BulkLines, options: BulkSenderOptions, stats: BulkStats): Promise<void> {
  const { retries = 3, retryDelayMs = 500 } = options;
  let pending = body;
  for (let attempt = 0; pending.count > 0; attempt++) {
    const { accepted, throttled } = await sendOnce(pending, options, stats);
    if (accepted.length > 0) await options.onAccepted?.(accepted);
    if (throttled.length === 0) break;
    if (attempt >= retries) {
      for (const i of throttled) drop(pending, i, { status: 429, type: "es_rejected_execution_exception", reason: "still throttled after retries" }, options, stats);
      break;
    }
    stats.retried += throttled.length;
    await delay(retryDelayMs * 2 ** attempt, options.signal);
    pending = copyItems(pending, throttled);
  }
  stats.bulks++;
  await options.onBulkSettled?.(stats);
}

/** A body of some of another body's items, for their retry. */
function copyItems(from: BulkLines, items: readonly number[]): BulkLines {
  const copy = new BulkLines(items.length);
  for (const i of items) copy.appendItems(from, i, i + 1);
  return copy;
}

/**
 * How long a bulk waits for an unavailable shard (a primary lost with its node) before answering
 * that item 503. Elasticsearch's default, 1 minute, equals the client's request timeout
 * (src/elasticsearch-client.ts): the client gave up just before the answer and sent the bulk
 * again, twice, so a lost node held a run for 3 minutes.
 */
export const BULK_SHARD_WAIT = "20s";

async function sendOnce(body: BulkLines, options: BulkSenderOptions, stats: BulkStats): Promise<{ accepted: BulkAction[]; throttled: number[] }> {
  stats.bytes += body.byteLength;
  let response;
  try {
    // A pre-serialised NDJSON body is sent as is by the client.
    response = await options.client.bulk(
      {
        index: options.index,
        operations: body.bytes as never,
        filter_path: BULK_RESULT_FIELDS,
        timeout: BULK_SHARD_WAIT,
        ...(options.requireAlias ? { require_alias: true } : {}),
      },
      { signal: options.signal },
    );
  } catch (err) {
    // A whole request answered 429 is throttling like a 429 item: every document is retried.
    if (err instanceof errors.ResponseError && err.statusCode === 429) return { accepted: [], throttled: Array.from({ length: body.count }, (_, i) => i) };
    throw new IndexingError("BULK_FAILED", `bulk request to index '${options.index}' failed: ${describe(err)}`, {
      cause: err,
      unavailable: isUnreachable(err),
    });
  }
  const accepted: BulkAction[] = [];
  const throttled: number[] = [];
  const wantsAccepted = options.onAccepted !== undefined;
  let lostShard: string | undefined;
  const results = response.items;
  for (let i = 0; i < results.length; i++) {
    const result = results[i]!;
    const outcome = result.index ?? result.create ?? result.update ?? result.delete;
    const status = outcome?.status ?? 500;
    const missingDelete = result.delete !== undefined && status === 404;
    const superseded = status === 409 && body.action(i).version !== undefined;
    if (missingDelete) stats.missing++;
    if (superseded) stats.superseded++;
    if ((status >= 200 && status < 300) || missingDelete || superseded) {
      if (wantsAccepted) accepted.push(body.action(i));
      stats.successful++;
    } else if (status === 429) {
      throttled.push(i);
    } else if (status === 503) {
      lostShard ??= outcome?.error?.reason ?? "a shard is unavailable";
    } else {
      drop(body, i, { status, type: outcome?.error?.type ?? "unknown", reason: outcome?.error?.reason ?? "rejected" }, options, stats);
    }
  }
  // A shard with no copy left (its node died) fails every later bulk that touches it, each after
  // BULK_SHARD_WAIT: the run stops at the first one (503); the next run completes it.
  if (lostShard !== undefined) {
    throw new IndexingError("BULK_FAILED", `bulk request to index '${options.index}' failed: 503 unavailable shard (${lostShard})`, { unavailable: true });
  }
  return { accepted, throttled };
}

function drop(body: BulkLines, item: number, failure: BulkFailure, options: BulkSenderOptions, stats: BulkStats): void {
  stats.failed++;
  options.onDrop?.(body.action(item), failure);
}

function describe(err: unknown): string {
  if (err instanceof errors.ResponseError) return `${err.statusCode ?? "?"} ${err.body?.error?.type ?? err.name}`;
  if (isUnreachable(err)) return "Elasticsearch is unreachable";
  return messageOf(err);
}

function delay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}
