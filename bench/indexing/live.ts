import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import { createKnex, migrateToLatest } from "../../src/db/knex.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { measureBacklog } from "../../src/indexing/live/live-feed.js";
import { commitChanges, feedSize, goodsNo, pickKind, type CommittedChange, type PlannedChange } from "../../test/support/live-changes.js";
import { buildService, spawnService } from "../../test/support/spawn-service.js";
import { admin, databaseUrl, printTable, startCpuMeter, wholeNumber, type CpuUse } from "../shared/support.js";

// npm run bench:live [-- --goods N] [--seconds S] [--rates R,R] [--steps R,R] [--step-seconds S]
//
// Live indexing against the built service (INDEX_LIVE=true) on N generated goods (default
// 100,000). Writers commit the realistic mix (80% price or name updates, 10% taken off sale, 5%
// new products, 5% deletes; test/support/live-changes.ts) on a fixed timetable: a commit is due
// at t0 + i / rate whatever the previous ones took (open loop, up to 32 commits in flight).
//
// 1. Commit to searchable, at each of --rates (default 100 and 1,000 changes/s, 60 s each), one
//    change per commit: a reader searches the alias every 50 ms for the changes not yet seen
//    (_search, what a shopper finds) and records when each first shows its committed state
//    (present at least at its version, or gone). Prints p50/p95/p99/max.
// 2. The highest rate the follower sustains, stepping through --steps (default 2,000 to 10,000
//    changes/s, 20 s each): the highest rate the writers achieved while the oldest pending change
//    stayed under 5 s (the follower's own "fell behind" line), so the backlog stayed bounded. It
//    stops at the first step the follower fell behind, or the writers fell short of (the machine
//    gives no more). Above 1,000 changes/s a commit carries rate / 100 changes (a price sync's
//    batch): one change per commit tops out near 3,900 commits/s on the 2-core machine, a limit
//    of PostgreSQL with the feed's trigger, not of the follower.
// 3. Catch-up: every product changed in one commit, applied by the follower alone (no writers
//    competing for the two cores), as after an outage: its own ceiling.
//
// Both print the largest backlog, the oldest pending change, the service's RSS, the CPU of the
// service, PostgreSQL (every server process: the writers' too), Elasticsearch and this bench (%
// of one core) and how busy the whole machine was (% of all cores), from /proc.

const elasticsearchUrl = process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9200";
const BEHIND_MS = 5_000;

interface Run {
  rate: number;
  seconds: number;
  /** Changes per commit. */
  group: number;
  /** Whether a reader measures commit-to-searchable. */
  read: boolean;
}

interface Measured {
  committed: number;
  achieved: number;
  latencies: number[];
  neverSeen: number;
  maxBacklog: number;
  maxAgeMs: number;
  rssMb: [number, number];
  cpu: CpuUse;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      goods: { type: "string", default: "100000" },
      seconds: { type: "string", default: "60" },
      rates: { type: "string", default: "100,1000" },
      steps: { type: "string", default: "2000,3000,5000,7500,10000" },
      "step-seconds": { type: "string", default: "20" },
    },
  });
  const goods = wholeNumber(values.goods, "--goods");
  const seconds = wholeNumber(values.seconds, "--seconds");
  const rates = values.rates.split(",").map((rate) => wholeNumber(rate, "--rates"));
  const steps = values.steps.split(",").map((rate) => wholeNumber(rate, "--steps"));
  const stepSeconds = wholeNumber(values["step-seconds"], "--step-seconds");

  const dbName = `bench_${randomBytes(4).toString("hex")}`;
  const alias = `bench_live_${randomBytes(4).toString("hex")}`;
  await admin(`create database ${dbName}`);
  const dbUrl = databaseUrl(dbName);
  const knex = createKnex(dbUrl, { poolMax: 16 });
  const es = new Client({ node: elasticsearchUrl });
  try {
    await migrateToLatest(knex);
    await generateGoods(knex, { rows: goods });
    buildService();
    const service = await spawnService({ DATABASE_URL: dbUrl, ELASTICSEARCH_URL: elasticsearchUrl, GOODS_INDEX: alias, CRON_ENABLED: "false" }, { fromBuild: true });
    const pid = service.child.pid as number;
    let next = goods + 1;
    const fresh = () => goodsNo(next++);
    const verdicts: string[] = [];
    try {
      log(`waiting for the follower to index the ${goods} generated goods`);
      await waitForEmptyFeed(knex);

      const latencyRows = [["rate/s", "committed", "achieved/s", "p50 s", "p95 s", "p99 s", "max s", "never seen", "max backlog", "oldest s", "RSS MB", "CPU % svc/pg/es/bench", "busy %"]];
      for (const rate of rates) {
        log(`${rate} changes/s for ${seconds} s, one change per commit`);
        const result = await measure(knex, es, alias, pid, { rate, seconds, group: 1, read: true }, goods, fresh);
        const [p50, p95, p99, max] = [0.5, 0.95, 0.99, 1].map((q) => quantile(result.latencies, q) / 1000) as [number, number, number, number];
        latencyRows.push([String(rate), String(result.committed), String(Math.round(result.achieved)), ...[p50, p95, p99, max].map((s) => s.toFixed(2)), String(result.neverSeen), ...tail(result)]);
        if (rate === 1000) {
          verdicts.push(`${p50 <= 1 ? "ok  " : "MISS"} p50 at 1,000 changes/s: ${p50.toFixed(2)} s (target <= 1.0 s)`);
          verdicts.push(`${p99 <= 2 ? "ok  " : "MISS"} p99 at 1,000 changes/s: ${p99.toFixed(2)} s (target <= 2.0 s)`);
        }
        if (result.neverSeen > 0) verdicts.push(`MISS ${result.neverSeen} changes at ${rate}/s never seen in search`);
        await waitForEmptyFeed(knex);
      }

      const stepRows = [["rate/s", "per commit", "committed", "achieved/s", "kept up", "max backlog", "oldest s", "RSS MB", "CPU % svc/pg/es/bench", "busy %"]];
      let sustained = 0;
      for (const rate of steps) {
        const group = Math.max(1, Math.ceil(rate / 100));
        log(`${rate} changes/s for ${stepSeconds} s, ${group} changes per commit`);
        const result = await measure(knex, es, alias, pid, { rate, seconds: stepSeconds, group, read: false }, goods, fresh);
        const keptUp = result.maxAgeMs < BEHIND_MS;
        stepRows.push([String(rate), String(group), String(result.committed), String(Math.round(result.achieved)), keptUp ? "yes" : "no", ...tail(result)]);
        log(`  achieved ${Math.round(result.achieved)}/s, oldest pending ${(result.maxAgeMs / 1000).toFixed(1)} s: ${keptUp ? "kept up" : "fell behind"}`);
        await waitForEmptyFeed(knex);
        if (!keptUp) break;
        sustained = Math.max(sustained, Math.round(result.achieved));
        // The writers fell short: the machine has no more to give, a higher step measures only them.
        if (result.achieved < 0.95 * rate) break;
      }
      verdicts.push(`${sustained >= 5000 ? "ok  " : "MISS"} highest rate sustained: ${sustained} changes/s (target >= 5,000)`);

      log(`catch-up: every one of the ${goods} products changed in one commit`);
      const catchUp = await measureCatchUp(knex, pid, goods);

      console.log(`live indexing over ${goods} goods: commit to searchable, ${seconds} s per rate`);
      printTable(latencyRows);
      console.log(`\nhighest sustained rate, ${stepSeconds} s per step`);
      printTable(stepRows);
      const { parts, machineBusyPct } = catchUp.cpu;
      console.log(
        `\ncatch-up: ${goods} changed products applied in ${catchUp.seconds.toFixed(1)} s, ${Math.round(goods / catchUp.seconds)} changes/s` +
          ` (CPU % svc/pg/es/bench ${parts.service}/${parts.postgres}/${parts.elasticsearch}/${parts.bench}, busy ${machineBusyPct}%)`,
      );
      console.log("");
      for (const verdict of verdicts) console.log(verdict);
    } finally {
      await service.stop("SIGTERM");
    }
  } finally {
    await es.indices.delete({ index: `${alias}*`, expand_wildcards: "all", ignore_unavailable: true }).catch(() => {});
    await es.close();
    await knex.destroy();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
}

/** The columns every table ends with: max backlog, oldest pending, RSS range, CPU. */
function tail(result: Measured): string[] {
  const { parts, machineBusyPct } = result.cpu;
  return [
    String(result.maxBacklog),
    (result.maxAgeMs / 1000).toFixed(1),
    `${result.rssMb[0]}-${result.rssMb[1]}`,
    `${parts.service}/${parts.postgres}/${parts.elasticsearch}/${parts.bench}`,
    String(machineBusyPct),
  ];
}

async function measure(knex: Knex, es: Client, alias: string, pid: number, run: Run, goods: number, fresh: () => string): Promise<Measured> {
  const pending = new Map<string, CommittedChange>();
  const latencies: number[] = [];
  const rss: number[] = [];
  let maxBacklog = 0;
  let maxAgeMs = 0;
  let committed = 0;
  let writing = true;
  const started = Date.now();
  const end = started + run.seconds * 1000;
  const cpuMeter = startCpuMeter(pid);

  const writer = (async () => {
    const inFlight = new Set<Promise<void>>();
    // One commit per product at a time: two in flight could answer out of commit order.
    const changing = new Set<string>();
    const pickExisting = () => {
      for (;;) {
        const no = goodsNo(1 + Math.floor(Math.random() * goods));
        if (!changing.has(no)) return no;
      }
    };
    for (let i = 0; Date.now() < end; i++) {
      const wait = started + (i * run.group * 1000) / run.rate - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      while (inFlight.size >= 32) await Promise.race(inFlight);
      const planned = Array.from({ length: run.group }, (): PlannedChange => {
        const kind = pickKind();
        const existing = pickExisting();
        changing.add(existing);
        return { kind, existing, fresh: kind === "new" ? fresh() : "" };
      });
      const task = commitWithRetry(knex, planned).then((changes) => {
        committed += run.group;
        // Only each product's last change is waited for: it replaces an earlier one.
        if (run.read) for (const change of changes) pending.set(change.goodsNo, change);
      });
      const tracked = task.finally(() => {
        inFlight.delete(tracked);
        for (const change of planned) changing.delete(change.existing);
      });
      inFlight.add(tracked);
    }
    await Promise.all(inFlight);
    writing = false;
  })();

  const sampler = setInterval(() => {
    rss.push(rssMb(pid));
    // The follower's own measure of the feed (live-feed.ts): size and oldest pending change.
    void measureBacklog(knex).then((backlog) => {
      maxBacklog = Math.max(maxBacklog, backlog.pendingProducts);
      maxAgeMs = Math.max(maxAgeMs, backlog.oldestPendingAgeMs);
    });
  }, 500);

  // The reader: what search shows for the changes not yet seen, every 50 ms, 2,000 ids a search.
  const graceMs = 10_000;
  while (writing || (run.read && pending.size > 0 && Date.now() < end + graceMs)) {
    const ids = [...pending.keys()].slice(0, 2000);
    if (ids.length > 0) {
      const found = await es.search({ index: alias, size: ids.length, _source: false, version: true, query: { ids: { values: ids } } });
      const versions = new Map(found.hits.hits.map((hit) => [hit._id as string, BigInt(hit._version ?? 0)]));
      const now = Date.now();
      for (const id of ids) {
        const change = pending.get(id) as CommittedChange;
        const version = versions.get(id);
        const seen = change.expect === "absent" ? version === undefined : version !== undefined && version >= BigInt(change.version as string);
        if (seen) {
          latencies.push(now - change.committedAt);
          pending.delete(id);
        }
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await writer;
  clearInterval(sampler);
  const cpu = cpuMeter();
  latencies.sort((a, b) => a - b);
  return { committed, achieved: committed / run.seconds, latencies, neverSeen: pending.size, maxBacklog, maxAgeMs, rssMb: [Math.min(...rss), Math.max(...rss)], cpu };
}

/**
 * The follower's own ceiling, with no writer beside it: one commit changes every product's price,
 * and the clock runs until the feed is empty (the follower's catching_up state, as after an outage).
 */
async function measureCatchUp(knex: Knex, pid: number, goods: number): Promise<{ seconds: number; cpu: CpuUse }> {
  await knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = "SALE_PRICE" + 1 where "GOODS_NO" <= ?`, [goodsNo(goods)]);
  const cpuMeter = startCpuMeter(pid);
  const started = Date.now();
  await waitForEmptyFeed(knex);
  return { seconds: (Date.now() - started) / 1000, cpu: cpuMeter() };
}

/** Two writers' commits can deadlock on the same products (PostgreSQL aborts one): committed again. */
async function commitWithRetry(knex: Knex, planned: PlannedChange[]): Promise<CommittedChange[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await commitChanges(knex, planned);
    } catch (err) {
      if ((err as { code?: string }).code !== "40P01" || attempt === 5) throw err;
    }
  }
}

async function waitForEmptyFeed(knex: Knex): Promise<void> {
  while ((await feedSize(knex)) > 0) await new Promise((resolve) => setTimeout(resolve, 200));
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

function rssMb(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return match ? Math.round(Number(match[1]) / 1024) : 0;
}

function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:live failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
