import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { Config } from "./config.js";
import type { CreationHooks } from "./gpu/creation/creation.js";
import type { Marketplace } from "./gpu/marketplace/port.js";
import type { Metrics } from "./server/metrics.js";
import type { ServiceRegistration } from "./server/service-registration.js";

// What the app gives each service module and what a module gives back: the app (app.ts) and the
// modules (gpu/, indexing/) both import these types, and not each other.

export interface AppDeps {
  config: Config;
  logger: Logger;
  knex: Knex;
  elasticsearch: Client;
  marketplace: Marketplace;
  /** Test seam for fault injection in GPU instance creation. */
  gpuCreationHooks?: CreationHooks;
}

/**
 * What each service module is built from: the app's dependencies, the metrics registry, and the
 * endpoint proxy's counts and traffic in this process (which the GPU module publishes).
 */
export type ModuleDeps = AppDeps & { metrics: Metrics; proxyLoad: ProxyLoad; proxyTraffic: ProxyTraffic; keyUsage: KeyUsage };

/** A service with the background work it owns. */
export interface ServiceModule {
  service: ServiceRegistration;
  start(): Promise<void>;
  stop(): Promise<void>;
}


/** A replica the proxy may send requests to. */
export interface RouteTarget {
  instanceId: string;
  /** Base URL of its model server, e.g. http://203.0.113.5:41234 (no trailing slash, no /v1). */
  url: string;
  /** The model server's own key (sent as Authorization: Bearer), null for servers without one. */
  apiKey: string | null;
}

/** How an endpoint's requests choose among its ready replicas (SPEC.md section 2, "Requests that share a prompt go where it is cached"). */
export const ENDPOINT_ROUTINGS = ["prefix", "least_outstanding"] as const;
export type EndpointRouting = (typeof ENDPOINT_ROUTINGS)[number];

/** What the proxy learns of an endpoint when it routes a request to it. */
export interface EndpointRoute {
  /** The endpoint's id: what its load is counted and published under (a name can be reused). */
  endpointId: string;
  /** Its ready replicas now; [] when none is. */
  targets: RouteTarget[];
  /**
   * With no ready replica: whether one is coming (starting, a launch under way or allowed, an
   * autoscaled endpoint that a request wakes), so that the request is held rather than refused.
   */
  coming: boolean;
  /** Why nothing is coming, when that is known: the 503's detail names it. */
  refusal?: "parked" | "deleting" | "budget";
  /** How its requests choose a ready replica; absent: least outstanding requests. */
  routing?: EndpointRouting;
}

/** Where the proxy finds an endpoint's ready replicas, and whether one is coming. */
export interface EndpointDirectory {
  /** undefined: no such endpoint (or deleted) -> 404. */
  route(name: string): Promise<EndpointRoute | undefined>;
}

/** One endpoint's requests in the proxy of this process, as the load publisher reads them. */
export interface ProxyLoadEntry {
  endpointId: string;
  /** Requests sent to a replica whose answer has not ended. */
  inFlight: number;
  /** Requests waiting in the proxy for a replica to become ready. */
  held: number;
  /** inFlight by replica (instance id); replicas with none are left out. */
  byReplica: Record<string, number>;
  /** Answers in flight by caller (a key's or static token's name), held ones included; callers with none are left out. */
  byCaller: Record<string, number>;
  /** When the last request for the endpoint arrived here; null when none has. */
  lastRequestAt: Date | null;
}

/**
 * The endpoint proxy's counts in this process (SPEC.md section 2, "Endpoints that follow their
 * load"): the proxy (server/proxy/) counts, the GPU module publishes them through PostgreSQL for
 * the controller. The app creates one and hands it to both, which then need not know each other.
 */
export interface ProxyLoad {
  /** A request for the endpoint arrived (it wakes an idle endpoint; it resets scale to zero's clock). */
  arrived(endpointId: string): void;
  /** One request more (+1) or fewer (-1) held for the endpoint. */
  held(endpointId: string, delta: 1 | -1): void;
  /** One request more (+1) or fewer (-1) in flight to the endpoint's replica `instanceId`. */
  sent(endpointId: string, instanceId: string, delta: 1 | -1): void;
  /**
   * One answer more (+1) or fewer (-1) in flight for `caller` (a key's or static token's name, as
   * its usage names it), from its admission, held or sent, to its end (SPEC.md section 2, "Keys
   * for callers", in_flight).
   */
  callerAnswer(endpointId: string, caller: string, delta: 1 | -1): void;
  /** The endpoints with requests now, or with any change within the last `recentMs`. */
  entries(recentMs: number): ProxyLoadEntry[];
}

/** How a request through the proxy counts in an endpoint's history (SPEC.md section 5). */
export type TrafficOutcome = "ok" | "clientError" | "serverError" | "held" | "continued" | "cut";

/**
 * Upper bounds (ms) of the first byte's histogram buckets, as the history stores them (one more
 * bucket past the last bound): the proxy's first-byte metric's buckets, in milliseconds.
 */
export const FIRST_BYTE_BOUNDS_MS: readonly number[] = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000];

/** One endpoint's traffic through this process's proxy in one minute: absolute counts so far. */
export interface TrafficEntry {
  endpointName: string;
  /** The minute's start. */
  minute: Date;
  counts: Record<TrafficOutcome, number>;
  /** Answers by first-byte latency: one count per FIRST_BYTE_BOUNDS_MS bucket, and one for slower. */
  firstByte: number[];
}

/**
 * What the endpoint proxy of this process answered, per endpoint and minute, for the endpoints'
 * history: the proxy counts (server/proxy/proxy-traffic.ts), the GPU module publishes.
 */
export interface ProxyTraffic {
  count(endpointName: string, outcome: TrafficOutcome): void;
  firstByte(endpointName: string, ms: number): void;
  /** The minutes changed since `since` (epoch ms), newest included; older minutes are forgotten. */
  changedSince(since: number): TrafficEntry[];
}

/** One caller's usage of one endpoint through this process's proxy in one minute: absolute counts so far. */
export interface KeyUsageEntry {
  /** A key's name, or a static token's (`AUTH_TOKENS#1`, a token file's name). */
  caller: string;
  endpointName: string;
  /** The minute's start. */
  minute: Date;
  /** Answers admitted (that reached a replica's exchange), whatever their status. */
  requests: number;
  promptTokens: number;
  completionTokens: number;
  /** Answers whose usage was estimated (no replica counted it). */
  estimated: number;
  /** Requests refused for the caller's limits, by reason (rpm_limit, tpm_limit, parallel_limit, budget_exceeded). */
  refused: Record<string, number>;
  /** When the minute's last answer ended (the key's last_used_at); null: none did, only refusals. */
  lastAnsweredAt: Date | null;
}

/**
 * What each caller used through this process's proxy, per endpoint and minute: the proxy's settle
 * step counts (server/keys/key-usage.ts), the GPU module publishes with the traffic.
 */
export interface KeyUsage {
  settled(answer: { endpoint: string; caller: string; usage: { promptTokens: number; completionTokens: number; estimated: boolean } }): void;
  refused(caller: string, endpointName: string, reason: string): void;
  /** The minutes changed since `since` (epoch ms), newest included; older minutes are forgotten. */
  changedSince(since: number): KeyUsageEntry[];
}
