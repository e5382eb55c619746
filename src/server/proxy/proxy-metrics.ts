import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { CountedCounter, CountedHistogram } from "../counted-metrics.js";
import type { PrefixOutcome } from "../prefix-index/prefix-choice.js";
import type { KeptBytes } from "./kept-body.js";

/** Why a request got 503 from the proxy itself (gpu_endpoint_refused_total's `reason`; docs/endpoints.md, "Metrics"). */
export type RefusalReason = "not_coming" | "holding_off" | "hold_full" | "hold_timeout" | "kept_bytes" | "stopping";

/** Why a streamed answer ended with an error event instead of being continued (gpu_endpoint_streams_cut_total's `reason`). */
export type CutReason = "not_resumable" | "limit" | "no_replica";

/** The endpoint proxy's metrics (SPEC.md section 2, "Endpoints"), labelled by endpoint name. */
export interface ProxyMetrics {
  /**
   * One request through the proxy, by the status the caller got (499: the caller left first;
   * 502 also for an answer the replica cut off after it started).
   */
  answered(endpoint: string, code: number): void;
  /** Time from the request's arrival to the replica's answer headers. */
  firstByte(endpoint: string, seconds: number): void;
  retried(endpoint: string): void;
  /** One 503 of the proxy's own (no replica asked), by why (hold-queue.ts, RefusalReason). */
  refused(endpoint: string, reason: RefusalReason): void;
  /** How long a request waited for a ready replica, however its wait ended (sent, 503, caller gone). */
  held(endpoint: string, seconds: number): void;
  /** A streamed answer cut by its replica continued on another; `seconds` from the cut to its first continued token. */
  resumed(endpoint: string, seconds: number): void;
  /** A streamed answer cut by its replica and ended with an error event, by why it was not continued. */
  streamCut(endpoint: string, reason: CutReason): void;
  /**
   * A request of an endpoint routed by prefix sent to its first replica, by how it was chosen, and
   * the share of its prompt's blocks that replica held (undefined: a prompt shorter than a block).
   */
  prefixRouted(endpoint: string, outcome: PrefixOutcome, found: number | undefined): void;
}

// From a cached one-token answer to a cold model's first token after minutes.
const FIRST_BYTE_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

// The share of a prompt found: none, a shared system prompt, most of a conversation.
const FOUND_BUCKETS = [0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1];

// From a replica that became ready at once to GPU_ENDPOINT_HOLD_MS (300 s by default) and more.
const HOLD_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** The proxy's metrics; `kept` is read at scrape time for gpu_endpoint_kept_body_bytes. */
export function createProxyMetrics(registry: Registry, kept: KeptBytes): ProxyMetrics {
  // Counted once or twice per request: counted-metrics.ts.
  const requests = new CountedCounter({
    name: "gpu_endpoint_requests_total",
    help: "Requests through the endpoint proxy by endpoint and the HTTP status the caller got (499: caller left before the end; 502 also when the replica cut an answer off)",
    labelNames: ["endpoint", "code"],
    registers: [registry],
  });
  const firstByte = new CountedHistogram({
    name: "gpu_endpoint_first_byte_seconds",
    help: "Time from a request's arrival at the proxy to its replica's answer headers (a streamed completion: to its first event)",
    labelNames: ["endpoint"],
    buckets: FIRST_BYTE_BUCKETS,
    registers: [registry],
  });
  const retries = new Counter({
    name: "gpu_endpoint_retries_total",
    help: "Requests sent again to another replica after a connection error or a 502/503/504 before any answer byte",
    labelNames: ["endpoint"],
    registers: [registry],
  });
  const refusals = new Counter({
    name: "gpu_endpoint_refused_total",
    help: "Requests the endpoint proxy answered 503 itself, no replica asked, by endpoint and reason (not_coming, holding_off, hold_full, hold_timeout, kept_bytes, stopping)",
    labelNames: ["endpoint", "reason"],
    registers: [registry],
  });
  new Gauge({
    name: "gpu_endpoint_kept_body_bytes",
    help: "Bytes of request bodies this process's endpoint proxy keeps now for holding and retries (bounded by GPU_ENDPOINT_KEPT_BODY_BYTES)",
    registers: [registry],
    collect() {
      this.set(kept.bytes);
    },
  });
  const hold = new Histogram({
    name: "gpu_endpoint_hold_seconds",
    help: "Time requests waited in this process's proxy for a ready replica (sent, refused, or their caller left)",
    labelNames: ["endpoint"],
    buckets: HOLD_BUCKETS,
    registers: [registry],
  });
  const resumed = new Counter({
    name: "gpu_endpoint_streams_resumed_total",
    help: "Streamed answers cut by their replica (connection ended before [DONE], or silent for GPU_ENDPOINT_STALL_MS) and continued on another replica",
    labelNames: ["endpoint"],
    registers: [registry],
  });
  const cut = new Counter({
    name: "gpu_endpoint_streams_cut_total",
    help: "Streamed answers cut by their replica and ended with an error event, by why they were not continued (not_resumable, limit, no_replica)",
    labelNames: ["endpoint", "reason"],
    registers: [registry],
  });
  const resume = new Histogram({
    name: "gpu_endpoint_resume_seconds",
    help: "Time from a streamed answer's cut to the continuation's first token",
    labelNames: ["endpoint"],
    buckets: FIRST_BYTE_BUCKETS,
    registers: [registry],
  });
  const prefixRouted = new CountedCounter({
    name: "gpu_endpoint_prefix_routed_total",
    help: "Requests of endpoints routed by prefix, by how their replica was chosen: hit (the longest prefix of the prompt), miss (no replica held any: least outstanding), balanced (the holder was too busy: least outstanding)",
    labelNames: ["endpoint", "outcome"],
    registers: [registry],
  });
  const prefixFound = new CountedHistogram({
    name: "gpu_endpoint_prefix_found_ratio",
    help: "Share of each prompt's blocks found in the prefix index of the replica it was sent to (endpoints routed by prefix)",
    labelNames: ["endpoint"],
    buckets: FOUND_BUCKETS,
    registers: [registry],
  });
  return {
    resumed: (endpoint, seconds) => {
      resumed.inc({ endpoint });
      resume.observe({ endpoint }, seconds);
    },
    streamCut: (endpoint, reason) => cut.inc({ endpoint, reason }),
    answered: (endpoint, code) => requests.labels(endpoint, String(code)).inc(),
    firstByte: (endpoint, seconds) => firstByte.labels(endpoint).observe(seconds),
    retried: (endpoint) => retries.inc({ endpoint }),
    refused: (endpoint, reason) => refusals.inc({ endpoint, reason }),
    held: (endpoint, seconds) => hold.observe({ endpoint }, seconds),
    prefixRouted: (endpoint, outcome, found) => {
      prefixRouted.labels(endpoint, outcome).inc();
      if (found !== undefined) prefixFound.labels(endpoint).observe(found);
    },
  };
}
