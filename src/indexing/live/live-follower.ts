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
import { createBacklogWatch } from "./live-backlog.js";
import { claimDue, markFailed, readItems, removeApplied, setListening, type FeedBacklog, type FeedEntry } from "./live-feed.js";
import { createLiveSession, type LiveSession } from "./live-session.js";
import { afterPass, backoffMs, FIRST_STEP, type Step } from "./live-steps.js";

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

export function createLiveFollower(options: LiveFollowerOptions): LiveFollower {
  const { knex, elasticsearch: client, alias, enabled } = options;
  const logger = options.logger.child({ component: "live_follower" });
  const batchSize = options.batchSize ?? 1_000;
  const pollMs = options.pollMs ?? 1_000;
  const standbyRetryMs = options.standbyRetryMs ?? 2_000;
  const backlog = createBacklogWatch(knex, logger);
  let state: LiveState = enabled ? "standby" : "off";
  let stopped = false;
  // Stops a bulk in flight at shutdown: its entries stay in the feed for the next follower.
  const stopping = new AbortController();
  let loop: Promise<void> | undefined;
  let aliasChecked: { requireAlias: boolean } | undefined;
  /** goods_live_wakeup.listening as this follower last set it; unknown while it does not hold the lock. */
  let listening: boolean | undefined;

  /** A wake-up that no sleep has consumed yet. */
  let woken = false;
  let wakeWaiter: (() => void) | undefined;
  const wake = () => {
    woken = true;
    wakeWaiter?.();
  };
  /** Sleeps until a wake-up (consumed), the timeout, or stop; true unless the timeout ended it. */
  const sleep = (ms: number) =>
    new Promise<boolean>((resolve) => {
      const done = (awake: boolean) => {
        clearTimeout(timer);
        wakeWaiter = undefined;
        woken = false;
        resolve(awake);
      };
      const timer = setTimeout(() => done(false), ms);
      if (woken || stopped) return done(true);
      wakeWaiter = () => done(true);
    });

  async function run(): Promise<void> {
    if (!options.databaseUrl) throw new Error("the live follower needs a database URL for its own session");
    const held = createLiveSession({ databaseUrl: options.databaseUrl, logger, onWake: wake });
    let step = FIRST_STEP;
    while (!stopped) step = await perform(step, held);
    // Nobody waits for wake-ups any more: writers stop sending them (unless another replica took
    // over). At most a second: a database that is down must not hold the shutdown up.
    if (listening) {
      const unlisten = (async () => (await held.hold()) && (await listen(false)))().catch(() => undefined);
      await Promise.race([unlisten, new Promise((resolve) => setTimeout(resolve, 1_000).unref())]);
    }
    await held.release();
  }

  /** Performs one step of the loop (live-steps.ts) and returns the next. */
  async function perform(step: Step, held: LiveSession): Promise<Step> {
    switch (step.kind) {
      case "pass":
        if (!(await held.hold())) return enterStandby();
        return pass(step.failures);
      case "listen":
        // Listening from now on; the next pass looks once more for changes committed before.
        try {
          await listen(true);
          return FIRST_STEP;
        } catch (err) {
          return fail(err, 0);
        }
      case "idle":
        // A change committed during the last pass has woken it already. A poll that ran out with
        // no wake-up asserts the flag again (whoever cleared it, the next pass sets it).
        if (!(await sleep(pollMs))) listening = undefined;
        return FIRST_STEP;
      case "backoff":
        await sleep(backoffMs(step.failures));
        return { kind: "pass", failures: step.failures };
      case "standby":
        await sleep(standbyRetryMs);
        return FIRST_STEP;
    }
  }

  async function pass(failures: number): Promise<Step> {
    try {
      // A wake-up from before the claim is answered by it.
      woken = false;
      const claimed = await applyOnce();
      if (state === "waiting_for_elasticsearch") logger.info("Elasticsearch answers again: live changes flow");
      await backlog.observe();
      setState(claimed >= batchSize ? "catching_up" : "following");
      return afterPass(claimed, batchSize, listening);
    } catch (err) {
      return fail(err, failures);
    }
  }

  async function fail(err: unknown, failures: number): Promise<Step> {
    aliasChecked = undefined;
    await onFailure(err);
    return { kind: "backoff", failures: failures + 1 };
  }

  /** Another replica follows: this one forgets what it knew as the follower and keeps measuring the backlog. */
  async function enterStandby(): Promise<Step> {
    setState("standby");
    aliasChecked = undefined;
    listening = undefined;
    await backlog.observe().catch((err: unknown) => logger.debug({ err: messageOf(err) }, "measuring the live backlog as a standby failed"));
    return { kind: "standby" };
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
      return { enabled, state, ...(await backlog.measure()) };
    },
    lastStatus: () => ({ enabled, state, ...backlog.last() }),
  };
}

async function* once<T>(batch: T): AsyncGenerator<T> {
  yield batch;
}
