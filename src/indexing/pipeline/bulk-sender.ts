import { errors, type Client } from "@elastic/elasticsearch";
import { IndexingError, isUnreachable } from "../indexing-error.js";
import { messageOf } from "../../errors.js";
import { createLineEncoder, type LineEncoder } from "./line-encoder.js";

// Sends documents to Elasticsearch in bulk requests bounded by document count and by bytes, with
// at most `concurrency` requests in flight; the reading loop waits for a free slot, so a slow
// cluster pauses the source. Every document gets its own result: accepted ones go to onAccepted,
// 429s are retried with backoff, a 503 (a shard unavailable) fails the run, anything else goes to
// onDrop and is counted, never lost silently.
// An item without a document is a delete; a delete answered 404 is done (counted as missing).
// An item with a version is written with that external version: answered 409, a newer state of
// the document is already there, and the item is done too (counted as superseded).

export interface BulkItem<Meta> {
  /** Document _id: repeating a document upserts it. */
  readonly id: string;
  /** Absent: delete the document of this _id. */
  readonly document?: Record<string, unknown>;
  /** External version (decimal digits): an older state never overwrites a newer one. */
  readonly version?: string;
  /** What the caller needs back for accepted or dropped documents (e.g. the row's key). */
  readonly meta: Meta;
}

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

export interface BulkSenderOptions<Meta> {
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
  /** Awaited before the bulk's slot is freed, so slow bookkeeping also slows the reader. */
  onAccepted?: (metas: Meta[]) => Promise<void>;
  onDrop?: (item: { id: string; meta: Meta }, failure: BulkFailure) => void;
  /** Called after each bulk request has settled. */
  onBulkSettled?: (stats: Readonly<BulkStats>) => Promise<void> | void;
  signal?: AbortSignal;
  /** Live statistics, updated as bulks settle; created when not given. */
  stats?: BulkStats;
}

interface Entry<Meta> {
  readonly id: string;
  /** The item's NDJSON lines, UTF-8. */
  readonly bytes: Buffer;
  readonly versioned: boolean;
  readonly meta: Meta;
}

export function emptyBulkStats(): BulkStats {
  return { total: 0, successful: 0, failed: 0, missing: 0, superseded: 0, retried: 0, bytes: 0, bulks: 0 };
}

export async function sendBulks<Meta>(source: AsyncIterable<readonly BulkItem<Meta>[]>, options: BulkSenderOptions<Meta>): Promise<BulkStats> {
  const { bulkSize, maxBytes, concurrency, signal } = options;
  const stats = options.stats ?? emptyBulkStats();
  const inFlight = new Set<Promise<void>>();
  let failure: unknown;
  let batch: Entry<Meta>[] = [];
  let batchBytes = 0;
  const encode = createLineEncoder();

  const dispatch = async () => {
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
    const entries = batch;
    batch = [];
    batchBytes = 0;
    const request = sendWithRetries(entries, options, stats).catch((err: unknown) => {
      failure ??= err;
    });
    const tracked = request.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
  };

  for await (const items of source) {
    for (const item of items) {
      if (failure !== undefined || signal?.aborted) break;
      // Documents are serialised and encoded once, on arrival; the row object can then be collected.
      const bytes = encodeItem(encode, item);
      if (batch.length > 0 && batchBytes + bytes.length > maxBytes) await dispatch();
      batch.push({ id: item.id, bytes, versioned: item.version !== undefined, meta: item.meta });
      batchBytes += bytes.length;
      stats.total++;
      if (batch.length >= bulkSize) await dispatch();
    }
    if (failure !== undefined || signal?.aborted) break;
  }
  if (batch.length > 0 && failure === undefined && !signal?.aborted) await dispatch();
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

/** The item's NDJSON lines: an index action and its document, or a delete action. */
function encodeItem<Meta>(encode: LineEncoder, { id, document, version }: BulkItem<Meta>): Buffer {
  const target = `"_id":${JSON.stringify(id)}${version === undefined ? "" : `,"version":${versionNumber(version)},"version_type":"external"`}`;
  return document === undefined ? encode(`{"delete":{${target}}}\n`) : encode(`{"index":{${target}}}\n`, JSON.stringify(document), "\n");
}

/** The version goes into the action line as a JSON number: digits only, never anything else. */
function versionNumber(version: string): string {
  if (!/^\d{1,19}$/.test(version)) throw new RangeError(`an external version is a whole number, got '${version.slice(0, 40)}'`);
  return version;
}

async function sendWithRetries<Meta>(entries: Entry<Meta>[], options: BulkSenderOptions<Meta>, stats: BulkStats): Promise<void> {
  const { retries = 3, retryDelayMs = 500 } = options;
  let pending = entries;
  for (let attempt = 0; pending.length > 0; attempt++) {
    const { accepted, throttled } = await sendOnce(pending, options, stats);
    if (accepted.length > 0) await options.onAccepted?.(accepted);
    if (throttled.length === 0) break;
    if (attempt >= retries) {
      for (const entry of throttled) drop(entry, { status: 429, type: "es_rejected_execution_exception", reason: "still throttled after retries" }, options, stats);
      break;
    }
    stats.retried += throttled.length;
    await delay(retryDelayMs * 2 ** attempt, options.signal);
    pending = throttled;
  }
  stats.bulks++;
  await options.onBulkSettled?.(stats);
}

/**
 * How long a bulk waits for an unavailable shard (a primary lost with its node) before answering
 * that item 503. Elasticsearch's default, 1 minute, equals the client's request timeout
 * (src/elasticsearch-client.ts): the client gave up just before the answer and sent the bulk
 * again, twice, so a lost node held a run for 3 minutes.
 */
export const BULK_SHARD_WAIT = "20s";

async function sendOnce<Meta>(entries: Entry<Meta>[], options: BulkSenderOptions<Meta>, stats: BulkStats) {
  const body = Buffer.concat(entries.map((e) => e.bytes));
  stats.bytes += body.length;
  let response;
  try {
    // A pre-serialised NDJSON body is sent as is by the client.
    response = await options.client.bulk(
      {
        index: options.index,
        operations: body as never,
        filter_path: BULK_RESULT_FIELDS,
        timeout: BULK_SHARD_WAIT,
        ...(options.requireAlias ? { require_alias: true } : {}),
      },
      { signal: options.signal },
    );
  } catch (err) {
    // A whole request answered 429 is throttling like a 429 item: every document is retried.
    if (err instanceof errors.ResponseError && err.statusCode === 429) return { accepted: [] as Meta[], throttled: entries };
    throw new IndexingError("BULK_FAILED", `bulk request to index '${options.index}' failed: ${describe(err)}`, {
      cause: err,
      unavailable: isUnreachable(err),
    });
  }
  const accepted: Meta[] = [];
  const throttled: Entry<Meta>[] = [];
  let lostShard: string | undefined;
  response.items.forEach((result, i) => {
    const entry = entries[i] as Entry<Meta>;
    const outcome = result.index ?? result.create ?? result.update ?? result.delete;
    const status = outcome?.status ?? 500;
    const missingDelete = result.delete !== undefined && status === 404;
    const superseded = status === 409 && entry.versioned;
    if (missingDelete) stats.missing++;
    if (superseded) stats.superseded++;
    if ((status >= 200 && status < 300) || missingDelete || superseded) {
      accepted.push(entry.meta);
      stats.successful++;
    } else if (status === 429) {
      throttled.push(entry);
    } else if (status === 503) {
      lostShard ??= outcome?.error?.reason ?? "a shard is unavailable";
    } else {
      drop(entry, { status, type: outcome?.error?.type ?? "unknown", reason: outcome?.error?.reason ?? "rejected" }, options, stats);
    }
  });
  // A shard with no copy left (its node died) fails every later bulk that touches it, each after
  // BULK_SHARD_WAIT: the run stops at the first one (503); the next run completes it.
  if (lostShard !== undefined) {
    throw new IndexingError("BULK_FAILED", `bulk request to index '${options.index}' failed: 503 unavailable shard (${lostShard})`, { unavailable: true });
  }
  return { accepted, throttled };
}

function drop<Meta>(entry: Entry<Meta>, failure: BulkFailure, options: BulkSenderOptions<Meta>, stats: BulkStats): void {
  stats.failed++;
  options.onDrop?.({ id: entry.id, meta: entry.meta }, failure);
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
