import { randomUUID } from "node:crypto";
import { GPU_API_HINTS } from "./gpu/api-hints.js";
import { createGpuModule } from "./gpu/gpu-module.js";
import { KEY_API_HINTS } from "./gpu/keys/key-api-hints.js";
import { INDEXING_API_HINTS } from "./indexing/api-hints.js";
import { createIndexingModule } from "./indexing/indexing-module.js";
import type { AppDeps, ModuleDeps } from "./module.js";
import { createAppHandler } from "./server/app.js";
import { createTokenSource } from "./server/auth/token-source.js";
import { createKeyDirectory } from "./server/keys/key-directory.js";
import { KnexKeyStore } from "./server/keys/key-store.js";
import { createAllowances } from "./server/keys/allowances.js";
import { createKeyAdmission } from "./server/keys/key-admission.js";
import { KnexLeaseStore } from "./server/keys/lease-store.js";
import { KeptBytes } from "./server/proxy/kept-body.js";
import { createProxyLoad } from "./server/proxy/proxy-load.js";
import { createProxyTraffic } from "./server/proxy/proxy-traffic.js";
import { createKeyUsage } from "./server/keys/key-usage.js";
import type { NodeHandler } from "./server/node-http.js";
import { createMetrics } from "./server/metrics.js";
import { mergeApiHints } from "./server/openapi/api-hints.js";

export type { AppDeps } from "./module.js";

export interface App {
  handler: NodeHandler;
  /** Starts background work (status sync, cron). */
  start(): Promise<void>;
  /** Stops background work; running jobs finish or abort cleanly. */
  stop(): Promise<void>;
  /** Re-reads AUTH_TOKENS_FILE (SIGHUP); a bad file keeps the previous tokens. */
  reloadTokens(): Promise<void>;
}

/** Wires both services over the given dependencies. Used by src/main.ts and by the tests. */
export function createApp(deps: AppDeps): App {
  const { config, logger, knex, elasticsearch } = deps;
  const metrics = createMetrics();
  // Counted by the endpoint proxy, published by the GPU module for the controller on the leader.
  const proxyLoad = createProxyLoad();
  // The proxy's answers per endpoint and minute, published the same way for the endpoints' history.
  const proxyTraffic = createProxyTraffic();
  // Each caller's usage per endpoint and minute, published the same way for the keys' usage.
  const keyUsage = createKeyUsage();
  // Stopping answers the proxy's held requests at once, before the modules stop.
  const stopping = new AbortController();
  const moduleDeps: ModuleDeps = { ...deps, metrics, proxyLoad, proxyTraffic, keyUsage };
  // First, so that a bad AUTH_TOKENS_FILE stops the start before any module is built.
  const tokens = createTokenSource({ envTokens: config.authTokens, file: config.authTokensFile, logger });
  // The keys for callers of the endpoints, held in memory and followed from the database.
  const keys = createKeyDirectory({ store: KnexKeyStore.create({ knex }), logger });
  // Their limits, kept across every process by leases; this process is one holder among them.
  const allowances = createAllowances({ store: KnexLeaseStore.create({ knex }), processId: randomUUID(), logger });
  const keyAdmission = createKeyAdmission({ allowances, priceOf: keys.priceOf, holdTokens: config.gpu.endpoints.keyHoldTokens, usage: keyUsage });
  const gpu = createGpuModule(moduleDeps);
  const modules = [gpu, createIndexingModule(moduleDeps)];
  const handler = createAppHandler({
    services: modules.map((m) => m.service),
    logger,
    tokens,
    keys,
    keyAdmission,
    maxBodyBytes: config.maxBodyBytes,
    metrics,
    apiHints: mergeApiHints(GPU_API_HINTS, KEY_API_HINTS, INDEXING_API_HINTS),
    endpoints: gpu.endpoints,
    endpointFirstByteMs: config.gpu.endpoints.firstByteMs,
    endpointHold: { ms: config.gpu.endpoints.holdMs, max: config.gpu.endpoints.holdMax },
    endpointContinuation: { stallMs: config.gpu.endpoints.stallMs, resumeMax: config.gpu.endpoints.resumeMax },
    endpointPrefix: { ttlMs: config.gpu.endpoints.prefixTtlMs, maxBlocks: config.gpu.endpoints.prefixMaxBlocks },
    endpointLoad: proxyLoad,
    endpointKept: new KeptBytes(config.gpu.endpoints.keptBodyBytes),
    endpointTraffic: proxyTraffic,
    endpointUsage: keyUsage,
    shutdown: stopping.signal,
    readiness: {
      database: async () => {
        await knex.raw("select 1");
      },
      search_engine: async () => {
        await elasticsearch.cluster.health({ timeout: "1s" }, { requestTimeout: 2000, maxRetries: 0 });
      },
    },
    readinessDetails: { leadership: () => gpu.leadership() },
  });
  return {
    handler,
    async start() {
      tokens.watch();
      await keys.start();
      for (const module of modules) await module.start();
    },
    async stop() {
      stopping.abort();
      tokens.close();
      keys.stop();
      // Every lease back before the modules (and the database) stop.
      await allowances.close();
      for (const module of modules) await module.stop();
    },
    reloadTokens: () => tokens.reload(),
  };
}
