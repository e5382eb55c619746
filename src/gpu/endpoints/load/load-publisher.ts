import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { KeyUsage, ProxyLoad, ProxyTraffic } from "../../../module.js";
import type { KeyUsageStore } from "../../../server/keys/key-usage-store.js";
import type { LoadStore } from "./load-store.js";
import type { TrafficStore } from "./traffic-store.js";

// Every service process, leader or not, publishes its proxy's load through PostgreSQL about every
// second (one upsert per tick, only while it has or just had requests), so that the controller on
// the sync leader scales on load that arrives at any process and the key reads sum each caller's
// answers in flight (in the same rows); and, in the same tick, the minutes
// of its proxy's traffic and of its callers' usage that changed, for the endpoints' history and
// the keys' usage (one statement each, whatever the request rate). No server of its own.

export interface LoadPublisher {
  /** This process's id in the table: random per start. */
  readonly processId: string;
  start(): void;
  /** Stops ticking and writes this process's counts as zero: its requests are being answered or cut. */
  stop(): Promise<void>;
  /** One tick now (tests). */
  publish(): Promise<void>;
}

export const PUBLISH_EVERY_MS = 1_000;
const PRUNE_EVERY_MS = 60_000;

export interface LoadPublisherDeps {
  store: LoadStore;
  load: ProxyLoad;
  /** The proxy's answers per minute and where they go; absent: load only. */
  traffic?: { source: ProxyTraffic; store: TrafficStore };
  /** Each caller's usage per endpoint and minute and where it goes; absent: none written. */
  usage?: { source: KeyUsage; store: Pick<KeyUsageStore, "publish"> };
  logger: Logger;
  intervalMs?: number;
  processId?: string;
}

export function createLoadPublisher(deps: LoadPublisherDeps): LoadPublisher {
  const { store, load, logger, traffic, usage } = deps;
  const intervalMs = deps.intervalMs ?? PUBLISH_EVERY_MS;
  const processId = deps.processId ?? randomUUID();
  // An endpoint whose load just ended is written a few more times, so that its zero lands even
  // when one write fails.
  const recentMs = 3 * intervalMs;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = true;
  let failing = false;
  let prunedAt = 0;
  // Traffic minutes changed from this moment on are not written yet (epoch ms).
  let trafficSince = 0;

  // Usage minutes likewise.
  let usageSince = 0;

  async function publishTraffic(): Promise<void> {
    if (traffic) {
      const since = Date.now();
      await traffic.store.publish(processId, traffic.source.changedSince(trafficSince));
      trafficSince = since;
    }
    if (usage) {
      const since = Date.now();
      await usage.store.publish(processId, usage.source.changedSince(usageSince));
      usageSince = since;
    }
  }

  async function publish(): Promise<void> {
    try {
      await store.publish(processId, load.entries(recentMs));
      await publishTraffic();
      if (Date.now() - prunedAt > PRUNE_EVERY_MS) {
        prunedAt = Date.now();
        await store.prune();
      }
      if (failing) logger.info("endpoint load published again");
      failing = false;
    } catch (err) {
      // Stale counts are ignored by the reader: a failed write under-counts for a while, nothing worse.
      if (!failing) logger.warn({ err }, "endpoint load could not be published");
      failing = true;
    }
  }

  const tick = () => {
    running = publish().finally(() => {
      running = undefined;
      if (!stopped) timer = setTimeout(tick, intervalMs).unref();
    });
  };

  return {
    processId,
    publish,
    start() {
      if (!stopped) return;
      stopped = false;
      timer = setTimeout(tick, intervalMs).unref();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      clearTimeout(timer);
      await running;
      const zero = load.entries(recentMs).map((e) => ({ ...e, inFlight: 0, held: 0, byReplica: {}, byCaller: {} }));
      await store.publish(processId, zero).catch((err: unknown) => logger.warn({ err }, "endpoint load could not be cleared"));
      await publishTraffic().catch((err: unknown) => logger.warn({ err }, "endpoint traffic could not be published"));
    },
  };
}
