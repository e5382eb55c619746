import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { GoodsAnalyzer } from "../../config.js";
import { isDatabaseUnavailable } from "../../db/database-errors.js";
import { messageOf, UnavailableError } from "../../errors.js";
import { whileBuildStays } from "../goods/build-lock.js";
import { aliasState, buildInProgress, buildingAlias, ensureGoodsAlias } from "../goods/goods-index.js";
import { IndexingError, isUnreachable } from "../indexing-error.js";
import { toBulkLines, type BulkLines } from "../pipeline/bulk-lines.js";
import { sendBulks } from "../pipeline/bulk-sender.js";
import { claimDue, markFailed, measureBacklog, readItems, removeApplied, setListening, type FeedBacklog, type FeedEntry } from "./live-feed.js";
import { createLiveSession, type LiveSession } from "./live-session.js";

// The live follower (SPEC.md section 3, "Live changes"): applies the feed continuously. Woken by
// NOTIFY (or its poll), it claims the oldest due products, reads their current bulk items, upserts the
// eligible ones and deletes the rest, each at its external version, through the alias and into a
// build index in progress; then it removes the entries Elasticsearch accepted. It is not a job:
// it takes no job lock, and one process across replicas follows (live-session.ts).
//
// Writers send a NOTIFY only while the follower listens (goods_live_wakeup.listening; migration
// 20261125010000_goods_live_wake_idle): a NOTIFY in every commit serialises busy writers. So it
// stops listening when a pass finds many changes, and from then goes straight from pass to pass
// until one finds nothing; then it listens again and sleeps.

export type LiveState = "following" | "catching_up" | "waiting_for_elasticsearch" | "standby" | "off";

export interface LiveStatus extends FeedBacklog {
  enabled: boolean;
  state: LiveState;
}

export interface LiveFollowerOptions {
  knex: Knex;
  elasticsearch: Client;
  logger: Logger;
  /** Off: the follower never starts; the feed keeps one entry per changed product until it does. */
  enabled: boolean;
  databaseUrl: string | undefined;
  /** GOODS_INDEX. */
  alias: string;
  analyzer: GoodsAnalyzer;
  /** Products per pass, one bulk request per target. */
  batchSize?: number;
  bulkMaxBytes: number;
  /**
   * The fallback poll, for wake-ups that never came (a connection lost, a change whose commit
   * straddled the moment the follower went to sleep) and retries that fall due.
   */
  pollMs?: number;
  /** A standby's wait between attempts at the lock. */
  standbyRetryMs?: number;
  /** A pass's products were accepted (applied changes). */
  onApplied?: (count: number) => void;
}

interface WriteTarget {
  index: string;
  requireAlias: boolean;
  /** The building alias: a build deleted meanwhile needs nothing more. */
  build: boolean;
}

interface WriteOutcome {
  accepted: Set<string>;
  refused: Map<string, string>;
}

export interface LiveFollower {
  start(): void;
  stop(): Promise<void>;
  /** This process's state, the feed's backlog as PostgreSQL has it now. */
  status(): Promise<LiveStatus>;
  /** The state and backlog as last measured, for metrics (no I/O). */
  lastStatus(): LiveStatus;
}

/** A pass that finds this many changes: writers are busy, and the follower stops listening. */
const BUSY_PASS = 10;
/** Oldest pending change older than this: the follower has fallen behind (logged once). */
const BEHIND_MS = 5_000;
/** ...and has caught up again once the oldest is younger than this. */
const CAUGHT_UP_MS = 1_000;

export function createLiveFollower(options: LiveFollowerOptions): LiveFollower {
  const { knex, elasticsearch: client, alias, enabled } = options;
  const logger = options.logger.child({ component: "live_follower" });
  const batchSize = options.batchSize ?? 1_000;
  const pollMs = options.pollMs ?? 1_000;
  const standbyRetryMs = options.standbyRetryMs ?? 2_000;
  let state: LiveState = enabled ? "standby" : "off";
  let backlog: FeedBacklog = { pendingProducts: 0, oldestPendingAgeMs: 0, appliedTotal: 0, lastAppliedAt: undefined };
  let behind = false;
  let measuredAt = 0;
  let stopped = false;
  // Stops a bulk in flight at shutdown: its entries stay in the feed for the next follower.
  const stopping = new AbortController();
  let loop: Promise<void> | undefined;
  let aliasChecked: { requireAlias: boolean } | undefined;
  /** goods_live_wakeup.listening as this follower last set it; unknown while it does not hold the lock. */
  let listening: boolean | undefined;

  let woken = false;
  let wakeWaiter: (() => void) | undefined;
  const wake = () => {
    woken = true;
    wakeWaiter?.();
  };
  /** Sleeps until a wake-up, the timeout, or stop; true unless the timeout ended it. */
  const sleep = (ms: number) =>
    new Promise<boolean>((resolve) => {
      if (woken || stopped) return resolve(true);
      const timer = setTimeout(() => done(false), ms);
      function done(awake: boolean) {
        clearTimeout(timer);
        wakeWaiter = undefined;
        resolve(awake);
      }
      wakeWaiter = () => done(true);
    });

  let session: LiveSession | undefined;

  async function run(): Promise<void> {
    if (!options.databaseUrl) throw new Error("the live follower needs a database URL for its own session");
    session = createLiveSession({ databaseUrl: options.databaseUrl, logger, onWake: wake });
    let failures = 0;
    while (!stopped) {
      if (!(await session.hold())) {
        setState("standby");
        aliasChecked = undefined;
        listening = undefined;
        await sleep(standbyRetryMs);
        continue;
      }
      try {
        woken = false;
        const claimed = await applyOnce();
        if (state === "waiting_for_elasticsearch") logger.info("Elasticsearch answers again: live changes flow");
        failures = 0;
        await observeBacklog();
        if (claimed >= batchSize) {
          setState("catching_up");
          continue;
        }
        setState("following");
        if (listening !== true) {
          // More may have committed during the pass, and no trigger wakes a follower not listening.
          if (claimed > 0) continue;
          // Listening from now on: look once more for changes committed before the flag was set.
          await listen(true);
          continue;
        }
        // Listening: a change committed during the pass has woken it already. A poll that ran out
        // with no wake-up asserts the flag again (whoever cleared it, the next pass sets it).
        if (!(await sleep(pollMs))) listening = undefined;
      } catch (err) {
        failures++;
        aliasChecked = undefined;
        await onFailure(err);
        // 0.5 s, doubling up to 5 s: a dependency back is noticed within seconds.
        woken = false;
        await sleep(Math.min(5_000, 250 * 2 ** Math.min(failures, 5)));
      }
    }
    // Nobody waits for wake-ups any more: writers stop sending them (unless another replica took
    // over). At most a second: a database that is down must not hold the shutdown up.
    if (listening) {
      const held = session;
      const unlisten = (async () => (await held.hold()) && (await listen(false)))().catch(() => undefined);
      await Promise.race([unlisten, new Promise((resolve) => setTimeout(resolve, 1_000).unref())]);
    }
    await session.release();
  }

  async function listen(value: boolean): Promise<void> {
    if (listening === value) return;
    await setListening(knex, value);
    listening = value;
  }

  async function onFailure(err: unknown): Promise<void> {
    // Unreachable itself, or wrapped: the 503 of a first index that could not be prepared, an IndexingError.
    const elasticsearchDown =
      isUnreachable(err) ||
      (err instanceof UnavailableError && isUnreachable(err.cause)) ||
      (err instanceof IndexingError && err.unavailable && !isDatabaseUnavailable(err.cause));
    if (elasticsearchDown) {
      if (state !== "waiting_for_elasticsearch") logger.warn({ err: messageOf(err) }, "Elasticsearch is unavailable: live changes wait in the feed");
      setState("waiting_for_elasticsearch");
    } else if (isDatabaseUnavailable(err) || (err instanceof IndexingError && isDatabaseUnavailable(err.cause))) {
      logger.warn({ err: messageOf(err) }, "the database is unavailable: live indexing waits");
    } else {
      logger.error({ err }, "a live indexing pass failed");
    }
  }

  /** One pass: returns how many entries it claimed. */
  async function applyOnce(): Promise<number> {
    const entries = await claimDue(knex, batchSize);
    if (entries.length === 0) return 0;
    if (entries.length >= BUSY_PASS) await listen(false);
    const [read, aliasTarget] = await Promise.all([readItems(knex, entries), checkedAlias()]);
    const items = toBulkLines(read);
    // The build in progress first (a change committed after its snapshot must reach it), then the
    // alias: a build that goes live after the first write has it, and the second reaches it again.
    const outcomes = [await writeToBuild(items), await writeTo(aliasTarget, items)];
    // Applied: accepted by every target. Refused: kept with backoff. Neither (shutdown): kept as is.
    let accepted = new Set(entries.map((e) => e.goodsNo));
    const refused = new Map<string, string>();
    for (const outcome of outcomes) {
      if (!outcome) continue;
      accepted = new Set([...accepted].filter((id) => outcome.accepted.has(id)));
      for (const [goodsNo, reason] of outcome.refused) if (!refused.has(goodsNo)) refused.set(goodsNo, reason);
    }
    if (stopping.signal.aborted) return entries.length;
    const applied = entries.filter((e) => accepted.has(e.goodsNo));
    const removed = await removeApplied(knex, applied);
    if (removed > 0) options.onApplied?.(removed);
    const failed = entries.filter((e) => refused.has(e.goodsNo)).map((e) => ({ ...e, error: refused.get(e.goodsNo) as string }));
    await markFailed(knex, failed);
    reportPoison(failed);
    return entries.length;
  }

  /** The alias as a write target; an older install's concrete index of the alias's name is written as it is. */
  async function checkedAlias(): Promise<WriteTarget> {
    if (!aliasChecked) {
      await ensureGoodsAlias(client, alias, options.analyzer, logger);
      aliasChecked = { requireAlias: (await aliasState(client, alias)).kind === "alias" };
    }
    return { index: alias, requireAlias: aliasChecked.requireAlias, build: false };
  }

  /**
   * Writes the items into the build in progress, if there is one, through its building alias;
   * the rebuild cannot remove that alias between the look and the write (build-lock.ts). The
   * first look, without the lock, spares the usual pass, with no build, a transaction.
   */
  async function writeToBuild(items: BulkLines): Promise<WriteOutcome | undefined> {
    if (!(await buildInProgress(client, alias))) return undefined;
    return whileBuildStays(knex, alias, async () => {
      if (!(await buildInProgress(client, alias))) return undefined;
      return writeTo({ index: buildingAlias(alias), requireAlias: true, build: true }, items);
    });
  }

  /** Writes the items into one target: which it accepted, which it refused and why. */
  async function writeTo(target: WriteTarget, items: BulkLines): Promise<WriteOutcome> {
    const accepted = new Set<string>();
    const refused = new Map<string, string>();
    await sendBulks(once(items), {
      client,
      index: target.index,
      requireAlias: target.requireAlias,
      bulkSize: batchSize,
      maxBytes: options.bulkMaxBytes,
      concurrency: 1,
      signal: stopping.signal,
      onAccepted: async (actions) => {
        for (const action of actions) accepted.add(action.id);
      },
      onDrop: (action, failure) => {
        // The build was deleted by hand between the look and the write.
        if (target.build && failure.type === "index_not_found_exception") return void accepted.add(action.id);
        if (!target.build && failure.type === "index_not_found_exception") aliasChecked = undefined;
        refused.set(action.id, `${failure.status} ${failure.type}: ${failure.reason}`);
      },
    });
    return { accepted, refused };
  }

  function reportPoison(refused: ReadonlyArray<FeedEntry & { error: string }>): void {
    // The fifth refusal in a row, once per product: from then on it is retried every 10 minutes at most.
    const poison = refused.filter((e) => e.attempts + 1 === 5);
    for (const entry of poison.slice(0, 10)) {
      logger.warn({ goods_no: entry.goodsNo, attempts: 5, reason: entry.error }, "Elasticsearch keeps refusing this product; it stays in the feed, retried every 10 minutes at most");
    }
  }

  /** Measures the backlog at most once a second; logs falling behind and catching up, once each. */
  async function observeBacklog(): Promise<void> {
    if (Date.now() - measuredAt < 1_000) return;
    measuredAt = Date.now();
    backlog = await measureBacklog(knex);
    if (!behind && backlog.oldestPendingAgeMs > BEHIND_MS) {
      behind = true;
      logger.warn({ pending_products: backlog.pendingProducts, oldest_pending_age_ms: backlog.oldestPendingAgeMs }, "live indexing fell behind");
    } else if (behind && backlog.oldestPendingAgeMs < CAUGHT_UP_MS) {
      behind = false;
      logger.info({ pending_products: backlog.pendingProducts }, "live indexing caught up");
    }
  }

  function setState(next: LiveState): void {
    state = next;
  }

  return {
    start() {
      if (!enabled || loop) return;
      loop = run().catch((err: unknown) => {
        logger.error({ err }, "the live follower stopped");
        setState("off");
      });
    },
    async stop() {
      stopped = true;
      stopping.abort(new Error("shutting down"));
      wake();
      await loop;
      if (enabled) setState("standby");
    },
    async status() {
      backlog = await measureBacklog(knex);
      return { enabled, state, ...backlog };
    },
    lastStatus: () => ({ enabled, state, ...backlog }),
  };
}

async function* once<T>(batch: T): AsyncGenerator<T> {
  yield batch;
}
