import { accessSync, constants as fsConstants } from "node:fs";
import { validate as validateCron } from "node-cron";
import { DEFAULT_READ_TIMEOUT_MS } from "./db/read-timeout.js";

// Configuration is read from the environment once, validated, and frozen. A bad variable fails
// start-up with a message naming it.

/** How long a client may take before it is cut off (README "Configuration"). */
export interface ConnectionTimeouts {
  /** From the first byte of a connection to the end of a request's headers (HTTP/1.1), ms. */
  headersMs: number;
  /** From a request's headers to the end of its body, any protocol; past it the request gets 408, ms. */
  requestMs: number;
  /** Idle HTTP/1.1 keep-alive connection, ms. */
  keepAliveMs: number;
  /** HTTP/2 session with no stream open, ms (a quiet stream open is not idle). */
  http2IdleMs: number;
}

export const DEFAULT_TIMEOUTS: ConnectionTimeouts = { headersMs: 30_000, requestMs: 60_000, keepAliveMs: 5_000, http2IdleMs: 300_000 };

/**
 * GPU_ENDPOINT_KEPT_BODY_BYTES's default, 64 MiB: what a 512 MiB container has left beside the
 * service idle and indexing (README, "Resources"). Buffers live off the V8 heap, which
 * --max-old-space-size does not bound.
 */
export const DEFAULT_KEPT_BODY_BYTES = 64 * 1024 * 1024;

/** The endpoint proxy's defaults, ms and counts (GPU_ENDPOINT_FIRST_BYTE_MS, _HOLD_MS, _HOLD_MAX, _STALL_MS, _RESUME_MAX). */
export const ENDPOINT_PROXY_DEFAULTS = Object.freeze({ firstByteMs: 300_000, holdMs: 300_000, holdMax: 1000, stallMs: 30_000, resumeMax: 2 });

/**
 * The proxy's prefix index, per replica (GPU_ENDPOINT_PREFIX_TTL_MS, GPU_ENDPOINT_PREFIX_MAX_BLOCKS):
 * a block sent to a replica is taken to be in its cache for 10 minutes; 16384 blocks of 64
 * characters are about 1 MiB of prompt text or 256k tokens, what a large GPU's KV cache holds for a
 * 7B model, in about 56 bytes of memory each: under 1 MiB a replica (docs/endpoints.md, "Prefix routing").
 */
export const ENDPOINT_PREFIX_DEFAULTS = Object.freeze({ ttlMs: 600_000, maxBlocks: 16_384 });

export interface Config {
  /** TCP port for every protocol (REST, Connect, gRPC, gRPC-Web). */
  readonly port: number;
  /** Interface to bind; forced to loopback when no auth token is configured. */
  readonly host: string;
  /** PostgreSQL URL; absent means the embedded PostgreSQL persisted under dataDir. */
  readonly databaseUrl: string | undefined;
  readonly dataDir: string;
  /** One Elasticsearch node URL, or several separated by commas. */
  readonly elasticsearchUrl: string;
  readonly indexing: IndexingConfig;
  readonly batch: BatchConfig;
  /** Bearer tokens accepted on every route but the health checks, each with every scope. */
  readonly authTokens: readonly string[];
  /** JSON file of named tokens with scopes (src/server/auth/token-file.ts); with no AUTH_TOKENS either, auth is off. */
  readonly authTokensFile: string | undefined;
  readonly logLevel: string;
  readonly tlsCertFile: string | undefined;
  readonly tlsKeyFile: string | undefined;
  /** Largest accepted REST request body, in bytes. */
  readonly maxBodyBytes: number;
  /** When slow or idle clients are cut off (src/server/listen.ts). */
  readonly timeouts: ConnectionTimeouts;
  readonly marketplace: MarketplaceConfig;
  readonly gpu: GpuConfig;
}

/** GpuService's background work. */
export interface GpuConfig {
  /** Interval of the status sync and reconciliation loop, ms. */
  readonly statusSyncMs: number;
  /** Timeout of each model-server health probe, ms. */
  readonly probeTimeoutMs: number;
  /** Status reads of one instance within this long reuse the last marketplace answer, ms; 0: never. */
  readonly statusCacheMs: number;
  /** GPU_DEPLOYMENT_ID: overrides the deployment id derived from the database (labels). */
  readonly deploymentId: string | undefined;
  /** Age after which a creating record with no marketplace instance is marked failed, ms. */
  readonly creationGraceMs: number;
  /** Cap on the summed cost_per_hour of active instances, $/h; undefined: no cap. */
  readonly maxFleetDph: number | undefined;
  /** HISTORY_DAYS: how long the endpoints' history is kept, and how far back a history read may reach. */
  readonly historyDays: number;
  /** API_READ_TIMEOUT_MS: statement timeout of the history and spend reads, ms (a slow one answers 503). */
  readonly apiReadTimeoutMs: number;
  readonly endpoints: EndpointConfig;
}

/** The endpoint controller's clocks (SPEC.md section 2, "Endpoints"). */
export interface EndpointConfig {
  /** GPU_ENDPOINT_PROBE_MS: interval of readiness probes and controller rounds, ms. */
  readonly probeMs: number;
  /** GPU_ENDPOINT_READY_AFTER: consecutive successful probes that make a replica ready. */
  readonly readyAfter: number;
  /** GPU_ENDPOINT_UNHEALTHY_MS: failing this long makes a ready replica unhealthy (replaced), ms. */
  readonly unhealthyMs: number;
  /** GPU_ENDPOINT_START_TIMEOUT_MS: a replica not ready this long after its launch is replaced, ms. */
  readonly startTimeoutMs: number;
  /** GPU_ENDPOINT_DRAIN_MS: how long a replica scaled away keeps its in-flight requests, ms. */
  readonly drainMs: number;
  /** GPU_ENDPOINT_MIX_RECHECK_MS: while no bid is cheap enough to take a fallback's place, how often one is looked for again, ms (at most a minute). */
  readonly mixRecheckMs: number;
  /** GPU_ENDPOINT_FIRST_BYTE_MS: how long the proxy waits for a replica's answer headers before a 504, ms (a slow first token is normal). */
  readonly firstByteMs: number;
  /** GPU_ENDPOINT_HOLD_MS: how long a request waits in the proxy for a replica to become ready before a 503, ms; 0: never held. */
  readonly holdMs: number;
  /** GPU_ENDPOINT_HOLD_MAX: how many requests may wait per endpoint in one service process; more get 503 at once. */
  readonly holdMax: number;
  /**
   * GPU_ENDPOINT_KEPT_BODY_BYTES: bytes of request bodies the proxy keeps in one service process,
   * all endpoints together, for holding and retries; past it a request that would be held gets 503.
   */
  readonly keptBodyBytes: number;
  /** GPU_ENDPOINT_STALL_MS: a streamed answer that started and sends no byte this long is taken for cut, ms. */
  readonly stallMs: number;
  /** GPU_ENDPOINT_RESUME_MAX: continuations of one streamed answer on another replica; 0: none. */
  readonly resumeMax: number;
  /** GPU_ENDPOINT_PREFIX_TTL_MS: how long the proxy takes a prompt block it sent to a replica to be in its cache, ms. */
  readonly prefixTtlMs: number;
  /** GPU_ENDPOINT_PREFIX_MAX_BLOCKS: prompt blocks the proxy's prefix index keeps per replica; the least recently sent go first. */
  readonly prefixMaxBlocks: number;
  /** GPU_KEY_HOLD_TOKENS: completion tokens a request without max_tokens holds against its key's limits. */
  readonly keyHoldTokens: number;
}

/** The marketplaces GpuService can rent from (MARKETPLACE). */
export const MARKET_NAMES = ["simulated", "remote", "vastai", "runpod"] as const;
export type MarketName = (typeof MARKET_NAMES)[number];

/** Which marketplaces GpuService rents from, and how each is reached or simulated. */
export interface MarketplaceConfig {
  /** MARKETPLACE: one market or several, distinct, in order of preference; the first is where records from before several markets belong. */
  readonly markets: readonly MarketName[];
  /** Remote only: base URL of the marketplace API (docs/marketplace-api.md). */
  readonly url: string | undefined;
  /** Remote only: sent as a bearer token; never logged. */
  readonly apiKey: string | undefined;
  /** Remote, vastai and runpod: per-attempt timeout, ms; with several markets also the most an offer search waits for each. */
  readonly timeoutMs: number;
  /** Remote only: retries after the first attempt. */
  readonly retries: number;
  /** vastai only: the account's API key, sent as a bearer token; never logged. */
  readonly vastApiKey: string | undefined;
  /** vastai only: base URL of vast.ai's REST API. */
  readonly vastApiUrl: string;
  /**
   * vastai only: minimum interval between two calls of one endpoint, ms, for every endpoint;
   * undefined: vast.ai's documented interval of each endpoint (vastai-http.ts).
   */
  readonly vastMinIntervalMs: number | undefined;
  /** vastai only: timeout of a create (renting can take vast.ai a minute), ms; other calls use timeoutMs. */
  readonly vastCreateTimeoutMs: number;
  /** vastai only: how long a create with no answer is looked for by its label before it is left to the reconciler, ms. */
  readonly vastCreateLookupMs: number;
  /** vastai only: hosts less reliable than this (vast.ai's reliability2, 0..1) are never offered. */
  readonly vastMinReliability: number;
  /** vastai only: retries of a call answered 429 (or failing transiently, when safe to repeat). */
  readonly vastRetries: number;
  /** vastai only: first backoff step after a 429, ms; doubles each retry up to 16x. */
  readonly vastBackoffMs: number;
  /** runpod only: the account's API key, sent as a bearer token; never logged. */
  readonly runpodApiKey: string | undefined;
  /** runpod only: base URL of RunPod's REST API (calls under /v2/). */
  readonly runpodApiUrl: string;
  /** Simulated only: how long an instance stays creating, then loading, then until its model server answers, ms. */
  readonly simCreatingMs: number;
  readonly simLoadingMs: number;
  readonly simModelServerStartMs: number;
  /** Simulated only: preemptions per interruptible instance-hour (0: never). */
  readonly simPreemptPerHour: number;
  /** Simulated only: the model servers' time per thousand prompt tokens not in their prefix cache, ms. */
  readonly simPrefillMsPerKtoken: number;
  /** Simulated only: each model server's prefix-cache budget, tokens (0: no prefix caching). */
  readonly simKvCacheTokens: number;
}

export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

/** Sizes of the indexing pipeline (SPEC.md section 3); defaults are the seed's. */
export interface IndexingConfig {
  /** Elasticsearch index of the goods documents (IndexGoods). */
  readonly goodsIndex: string;
  /** Rows per round trip of the reader's server-side cursor. */
  readonly fetchSize: number;
  /** Documents per bulk request of IndexGoods. */
  readonly bulkSize: number;
  /** Upper bound of one bulk request body, in bytes, whatever its document count. */
  readonly bulkMaxBytes: number;
  /** Bulk requests in flight at once. */
  readonly bulksInFlight: number;
  /** Documents the reader-to-sender channel holds; 0 means 2 x the bulk size. */
  readonly channelCapacity: number;
  /** Analyzer of GOODS_NM, BRAND_NM and CATE_PATH; takes effect with the next full run. */
  readonly goodsAnalyzer: GoodsAnalyzer;
  /** The live follower: committed changes searchable within about a second (SPEC.md section 3). */
  readonly live: boolean;
}

export type GoodsAnalyzer = "cjk" | "nori" | "standard";

/** The product batch's log index and the cron runner (SPEC.md section 3). */
export interface BatchConfig {
  /** Elasticsearch index of the batch log documents. */
  readonly logIndex: string;
  /** False switches the whole cron runner off. */
  readonly cronEnabled: boolean;
  /** node-cron expression (Asia/Seoul) of the full product batch, or "off". */
  readonly cronBatch: string;
  /** node-cron expression (Asia/Seoul) of the incremental indexing run, or "off". */
  readonly cronIncremental: string;
  /** The least window, in minutes, of the scheduled incremental run. */
  readonly cronIncrementalMinutes: number;
  /** Minutes added before the last successful run's start, for transactions that commit late. */
  readonly cronIncrementalOverlapMinutes: number;
}

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: Env = process.env): Config {
  const authTokens = list(env, "AUTH_TOKENS");
  // Unset means "no auth, loopback only"; set to nothing but separators is a mistake, not a choice.
  if (env.AUTH_TOKENS !== undefined && authTokens.length === 0) {
    throw new ConfigError("AUTH_TOKENS is set but holds no token (unset it to run without auth on loopback)");
  }
  const authTokensFile = text(env, "AUTH_TOKENS_FILE");
  const authOn = authTokens.length > 0 || authTokensFile !== undefined;
  const requestedHost = text(env, "HOST") ?? (authOn ? "0.0.0.0" : "127.0.0.1");
  const config: Config = {
    port: integer(env, "PORT", 8080, 0, 65535),
    host: authOn ? requestedHost : "127.0.0.1",
    databaseUrl: url(env, "DATABASE_URL", ["postgres:", "postgresql:"]),
    dataDir: text(env, "DATA_DIR") ?? "./data",
    elasticsearchUrl: urlList(env, "ELASTICSEARCH_URL", ["http:", "https:"]) ?? "http://127.0.0.1:9200",
    indexing: indexingConfig(env),
    batch: batchConfig(env),
    authTokens,
    authTokensFile,
    logLevel: oneOf(env, "LOG_LEVEL", LOG_LEVELS, "info"),
    tlsCertFile: text(env, "TLS_CERT_FILE"),
    tlsKeyFile: text(env, "TLS_KEY_FILE"),
    maxBodyBytes: integer(env, "MAX_BODY_BYTES", 1024 * 1024, 1, 64 * 1024 * 1024),
    timeouts: Object.freeze({
      headersMs: integer(env, "HTTP_HEADERS_TIMEOUT_MS", DEFAULT_TIMEOUTS.headersMs, 100, 600_000),
      requestMs: integer(env, "HTTP_REQUEST_TIMEOUT_MS", DEFAULT_TIMEOUTS.requestMs, 100, 3_600_000),
      keepAliveMs: integer(env, "HTTP_KEEP_ALIVE_TIMEOUT_MS", DEFAULT_TIMEOUTS.keepAliveMs, 100, 600_000),
      http2IdleMs: integer(env, "HTTP2_IDLE_TIMEOUT_MS", DEFAULT_TIMEOUTS.http2IdleMs, 100, 86_400_000),
    }),
    marketplace: marketplaceConfig(env),
    gpu: Object.freeze({
      statusSyncMs: integer(env, "GPU_STATUS_SYNC_MS", 15_000, 10, 86_400_000),
      probeTimeoutMs: integer(env, "GPU_PROBE_TIMEOUT_MS", 2_000, 1, 60_000),
      creationGraceMs: integer(env, "GPU_CREATION_GRACE_MS", 300_000, 0, 86_400_000),
      deploymentId: deploymentId(env, "GPU_DEPLOYMENT_ID"),
      statusCacheMs: integer(env, "GPU_STATUS_CACHE_MS", 2_000, 0, 60_000),
      maxFleetDph: positiveNumber(env, "GPU_MAX_FLEET_DPH"),
      historyDays: integer(env, "HISTORY_DAYS", 7, 1, 366),
      apiReadTimeoutMs: integer(env, "API_READ_TIMEOUT_MS", DEFAULT_READ_TIMEOUT_MS, 100, 600_000),
      endpoints: Object.freeze({
        probeMs: integer(env, "GPU_ENDPOINT_PROBE_MS", 10_000, 10, 3_600_000),
        readyAfter: integer(env, "GPU_ENDPOINT_READY_AFTER", 2, 1, 100),
        unhealthyMs: integer(env, "GPU_ENDPOINT_UNHEALTHY_MS", 180_000, 0, 86_400_000),
        startTimeoutMs: integer(env, "GPU_ENDPOINT_START_TIMEOUT_MS", 1_200_000, 1_000, 86_400_000),
        drainMs: integer(env, "GPU_ENDPOINT_DRAIN_MS", 30_000, 0, 3_600_000),
        mixRecheckMs: integer(env, "GPU_ENDPOINT_MIX_RECHECK_MS", 60_000, 10, 60_000),
        firstByteMs: integer(env, "GPU_ENDPOINT_FIRST_BYTE_MS", ENDPOINT_PROXY_DEFAULTS.firstByteMs, 1, 3_600_000),
        holdMs: integer(env, "GPU_ENDPOINT_HOLD_MS", ENDPOINT_PROXY_DEFAULTS.holdMs, 0, 3_600_000),
        holdMax: integer(env, "GPU_ENDPOINT_HOLD_MAX", ENDPOINT_PROXY_DEFAULTS.holdMax, 0, 100_000),
        keptBodyBytes: integer(env, "GPU_ENDPOINT_KEPT_BODY_BYTES", DEFAULT_KEPT_BODY_BYTES, 0, 16 * 1024 ** 3),
        stallMs: integer(env, "GPU_ENDPOINT_STALL_MS", ENDPOINT_PROXY_DEFAULTS.stallMs, 100, 3_600_000),
        resumeMax: integer(env, "GPU_ENDPOINT_RESUME_MAX", ENDPOINT_PROXY_DEFAULTS.resumeMax, 0, 10),
        prefixTtlMs: integer(env, "GPU_ENDPOINT_PREFIX_TTL_MS", ENDPOINT_PREFIX_DEFAULTS.ttlMs, 1_000, 86_400_000),
        prefixMaxBlocks: integer(env, "GPU_ENDPOINT_PREFIX_MAX_BLOCKS", ENDPOINT_PREFIX_DEFAULTS.maxBlocks, 1, 16_777_216),
        keyHoldTokens: integer(env, "GPU_KEY_HOLD_TOKENS", 1024, 1, 10_000_000),
      }),
    }),
  };
  if ((config.tlsCertFile === undefined) !== (config.tlsKeyFile === undefined)) {
    throw new ConfigError("TLS_CERT_FILE and TLS_KEY_FILE must be set together");
  }
  readableFile("TLS_CERT_FILE", config.tlsCertFile);
  readableFile("TLS_KEY_FILE", config.tlsKeyFile);
  return Object.freeze(config);
}

function marketplaceConfig(env: Env): MarketplaceConfig {
  const markets = marketList(env, "MARKETPLACE");
  const config: MarketplaceConfig = {
    markets,
    url: url(env, "MARKETPLACE_URL", ["http:", "https:"]),
    apiKey: text(env, "MARKETPLACE_API_KEY"),
    timeoutMs: integer(env, "MARKETPLACE_TIMEOUT_MS", 10_000, 1, 300_000),
    retries: integer(env, "MARKETPLACE_RETRIES", 3, 0, 10),
    vastApiKey: text(env, "VAST_API_KEY"),
    vastApiUrl: url(env, "VAST_API_URL", ["http:", "https:"]) ?? "https://console.vast.ai",
    vastMinIntervalMs: text(env, "VAST_MIN_INTERVAL_MS") === undefined ? undefined : integer(env, "VAST_MIN_INTERVAL_MS", 0, 0, 60_000),
    vastCreateTimeoutMs: integer(env, "VAST_CREATE_TIMEOUT_MS", 90_000, 1_000, 600_000),
    vastCreateLookupMs: integer(env, "VAST_CREATE_LOOKUP_MS", 30_000, 0, 600_000),
    vastMinReliability: fraction(env, "VAST_MIN_RELIABILITY", 0.95),
    vastRetries: integer(env, "VAST_RETRIES", 8, 0, 20),
    vastBackoffMs: integer(env, "VAST_BACKOFF_MS", 500, 1, 60_000),
    runpodApiKey: text(env, "RUNPOD_API_KEY"),
    runpodApiUrl: url(env, "RUNPOD_API_URL", ["http:", "https:"]) ?? "https://api.runpod.io",
    simCreatingMs: integer(env, "SIM_CREATING_MS", 5_000, 0, 3_600_000),
    simLoadingMs: integer(env, "SIM_LOADING_MS", 10_000, 0, 3_600_000),
    simModelServerStartMs: integer(env, "SIM_MODEL_SERVER_START_MS", 5_000, 0, 3_600_000),
    simPreemptPerHour: rate(env, "SIM_PREEMPT_PER_HOUR", 0, 3_600),
    simPrefillMsPerKtoken: integer(env, "SIM_PREFILL_MS_PER_KTOKEN", 20, 0, 60_000),
    simKvCacheTokens: integer(env, "SIM_KV_CACHE_TOKENS", 65_536, 0, 100_000_000),
  };
  // Every missing variable at once: an operator should not learn them one failed start at a time.
  const required: Record<MarketName, [string, unknown][]> = {
    simulated: [],
    remote: [["MARKETPLACE_URL", config.url], ["MARKETPLACE_API_KEY", config.apiKey]],
    vastai: [["VAST_API_KEY", config.vastApiKey]],
    runpod: [["RUNPOD_API_KEY", config.runpodApiKey]],
  };
  const missing = markets.flatMap((market) => required[market].filter(([, value]) => value === undefined).map(([name]) => name));
  if (missing.length > 0) {
    const when = markets.length === 1 ? `MARKETPLACE=${markets[0]}` : `MARKETPLACE names ${markets.filter((m) => required[m].some(([, v]) => v === undefined)).join(" and ")}`;
    throw new ConfigError(`${missing.join(" and ")} ${missing.length > 1 ? "are" : "is"} required when ${when}`);
  }
  return Object.freeze(config);
}

/** One market name or a comma-separated list of distinct ones, in order of preference; unset: simulated. */
function marketList(env: Env, name: string): MarketName[] {
  const names = list(env, name);
  if (names.length === 0) {
    if (env[name] !== undefined && env[name]!.trim() !== "") throw new ConfigError(`${name} holds no market name; one of ${MARKET_NAMES.join(", ")}`);
    return ["simulated"];
  }
  const seen = new Set<string>();
  for (const market of names) {
    if (!(MARKET_NAMES as readonly string[]).includes(market)) {
      throw new ConfigError(`${name} must name markets among ${MARKET_NAMES.join(", ")} (comma-separated), got '${market}'`);
    }
    if (seen.has(market)) throw new ConfigError(`${name} names '${market}' twice; each market once, in order of preference`);
    seen.add(market);
  }
  return names as MarketName[];
}

/** True when the configured host had to be narrowed to loopback because auth is off. */
export function hostNarrowedToLoopback(env: Env = process.env): boolean {
  const host = text(env, "HOST");
  return list(env, "AUTH_TOKENS").length === 0 && text(env, "AUTH_TOKENS_FILE") === undefined && host !== undefined && !isLoopback(host);
}

export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host.startsWith("127.");
}

function text(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === "" ? undefined : value;
}

function list(env: Env, name: string): string[] {
  return (text(env, name) ?? "")
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
}

export function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const value = text(env, name);
  if (value === undefined) return fallback;
  if (!/^-?\d+$/.test(value) || Number(value) < min || Number(value) > max) {
    throw new ConfigError(`${name} must be an integer from ${min} to ${max}, got '${value}'`);
  }
  return Number(value);
}

/** A deployment id for marketplace labels: letters, digits, `_` and `-`, at most 40. */
function deploymentId(env: Env, name: string): string | undefined {
  const value = text(env, name);
  if (value !== undefined && !/^[A-Za-z0-9_-]{1,40}$/.test(value)) {
    throw new ConfigError(`${name} must be 1 to 40 letters, digits, '_' or '-', got '${value}'`);
  }
  return value;
}

/** A number from 0 to 1. */
function fraction(env: Env, name: string, fallback: number): number {
  const value = text(env, name);
  if (value === undefined) return fallback;
  if (!/^\d+(\.\d+)?$/.test(value) || Number(value) > 1) {
    throw new ConfigError(`${name} must be a number from 0 to 1, got '${value}'`);
  }
  return Number(value);
}

/** A number from 0 to max (a rate per hour). */
function rate(env: Env, name: string, fallback: number, max: number): number {
  const value = text(env, name);
  if (value === undefined) return fallback;
  if (!/^\d+(\.\d+)?$/.test(value) || Number(value) > max) {
    throw new ConfigError(`${name} must be a number from 0 to ${max} (per hour), got '${value}'`);
  }
  return Number(value);
}

/** A number > 0, or undefined when the variable is unset. */
function positiveNumber(env: Env, name: string): number | undefined {
  const value = text(env, name);
  if (value === undefined) return undefined;
  if (!/^\d+(\.\d+)?$/.test(value) || !(Number(value) > 0)) {
    throw new ConfigError(`${name} must be a number > 0 (dollars per hour), got '${value}'`);
  }
  return Number(value);
}

export function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const value = text(env, name);
  if (value === undefined) return fallback;
  const found = allowed.find((candidate) => candidate === value);
  if (found === undefined) {
    throw new ConfigError(`${name} must be one of ${allowed.join(", ")}, got '${value}'`);
  }
  return found;
}

function indexingConfig(env: Env): IndexingConfig {
  return Object.freeze({
    goodsIndex: indexName(env, "GOODS_INDEX", "goods_ko"),
    // One fetch per bulk: measured 20% less service CPU than the seed's 50,000 (docs/indexing.md).
    fetchSize: integer(env, "INDEX_FETCH_SIZE", 3_000, 1, 1_000_000),
    bulkSize: integer(env, "INDEX_BULK_SIZE", 3_000, 1, 100_000),
    bulkMaxBytes: integer(env, "INDEX_BULK_MAX_BYTES", 10 * 1024 * 1024, 1024, 100 * 1024 * 1024),
    bulksInFlight: integer(env, "INDEX_BULKS_IN_FLIGHT", 2, 1, 16),
    channelCapacity: integer(env, "INDEX_CHANNEL_CAPACITY", 0, 0, 1_000_000),
    goodsAnalyzer: oneOf(env, "GOODS_ANALYZER", ["cjk", "nori", "standard"] as const, "cjk"),
    live: oneOf(env, "INDEX_LIVE", ["true", "false"], "true") === "true",
  });
}

function batchConfig(env: Env): BatchConfig {
  return Object.freeze({
    logIndex: indexName(env, "BATCH_LOG_INDEX", "batch_log"),
    cronEnabled: oneOf(env, "CRON_ENABLED", ["true", "false"], "true") === "true",
    cronBatch: cronExpression(env, "CRON_BATCH", "0 1 * * *"),
    cronIncremental: cronExpression(env, "CRON_INCREMENTAL", "*/30 * * * *"),
    cronIncrementalMinutes: integer(env, "CRON_INCREMENTAL_MINUTES", 30, 2, 10_080),
    cronIncrementalOverlapMinutes: integer(env, "CRON_INCREMENTAL_OVERLAP_MINUTES", 5, 0, 1_440),
  });
}

/** A node-cron expression (five or six fields), or "off". */
function cronExpression(env: Env, name: string, fallback: string): string {
  const value = text(env, name) ?? fallback;
  if (value !== "off" && !validateCron(value)) {
    throw new ConfigError(`${name} must be a cron expression such as '${fallback}' or 'off', got '${value}'`);
  }
  return value;
}

/** An Elasticsearch index name: lower case, no path or wildcard characters. */
function indexName(env: Env, name: string, fallback: string): string {
  const value = text(env, name) ?? fallback;
  if (!/^[a-z0-9][a-z0-9_.-]{0,254}$/.test(value)) {
    throw new ConfigError(`${name} must be a lower-case Elasticsearch index name, got '${value}'`);
  }
  return value;
}

/** Checked at start-up, before any migration runs, so that a typo is named instead of failing later. */
function readableFile(name: string, path: string | undefined): void {
  if (path === undefined) return;
  try {
    accessSync(path, fsConstants.R_OK);
  } catch (err) {
    throw new ConfigError(`${name} cannot be read: ${(err as NodeJS.ErrnoException).code ?? "error"} ${path}`);
  }
}

/** One URL or a comma-separated list of them, each checked; returned as given. */
function urlList(env: Env, name: string, protocols: string[]): string | undefined {
  const items = list(env, name);
  if (items.length === 0) return undefined;
  for (const item of items) url({ [name]: item }, name, protocols);
  return items.join(",");
}

function url(env: Env, name: string, protocols: string[]): string | undefined {
  const value = text(env, name);
  if (value === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    throw new ConfigError(`${name} is not a valid URL`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(`${name} must start with ${protocols.map((p) => `${p}//`).join(" or ")}`);
  }
  return value;
}
