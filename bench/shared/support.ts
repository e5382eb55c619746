// Shared by the benches: the throwaway database each one creates and drops, its goods, and their result tables.
import { readdirSync, readFileSync } from "node:fs";
import pg from "pg";
import { createKnex, migrateToLatest } from "../../src/db/knex.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";

/** The server the benches create their databases on: DATABASE_URL, or a local server. */
export function adminDatabaseUrl(): string {
  return process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
}

/** Runs one statement (create / drop database) on the server's admin database. */
export async function admin(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminDatabaseUrl() });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** The URL of database `name` on the same server as the admin database. */
export function databaseUrl(name: string): string {
  const url = new URL(adminDatabaseUrl());
  url.pathname = `/${name}`;
  return url.toString();
}

/** Prints rows as aligned columns: the first left-aligned, the others right-aligned. */
export function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const row of rows) console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  "));
}

/** N goods rows (every 10th out of use) in the scratch database; returns the eligible count. */
export async function seedGoods(databaseUrl: string, rows: number): Promise<number> {
  const knex = createKnex(databaseUrl, { poolMax: 2 });
  try {
    await migrateToLatest(knex);
    const started = Date.now();
    await generateGoods(knex, { rows, unusedEvery: 10 });
    await knex.raw(`vacuum analyze "PR_GOODS_SEARCH_INTF"`);
    const { rows: counted } = await knex.raw<{ rows: Array<{ n: number }> }>(`select count(*)::int as n from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`);
    console.log(`generated ${rows} goods rows in ${Date.now() - started} ms`);
    return counted[0]!.n;
  } finally {
    await knex.destroy();
  }
}

/** A few instances, so that the list and the statistics read real records. */
export async function createInstances(url: string): Promise<void> {
  for (const template of ["budget", "research", "high_performance", "budget", "research"]) {
    const res = await fetch(`${url}/api/gpu/instances/from-template?template_name=${template}`, { method: "POST" });
    if (res.status !== 200) throw new Error(`creating an instance from '${template}' answered ${res.status}: ${await res.text()}`);
  }
}

/** The value of metric `name`'s first sample, whatever its labels, in Prometheus' text format; undefined when it has none. */
export function metricSample(text: string, name: string): number | undefined {
  const value = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m").exec(text)?.[1];
  return value === undefined ? undefined : Number(value);
}

/** A command-line option that must be a whole number >= 1. */
export function wholeNumber(value: string | undefined, name: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a whole number >= 1, got '${value}'`);
  return n;
}

/**
 * CPU seconds a process has used so far (user + system); 0 once it is gone. The scheduler's own
 * count, in nanoseconds, summed over the process's threads (/proc/<pid>/task/<tid>/schedstat):
 * /proc/<pid>/stat's ticks are sampled 100 times a second, which over a few seconds of a busy
 * process is several percent off either way. (A thread that ended between two readings takes its
 * time with it: the processes measured keep theirs, Node's and nginx's alike.) Where the kernel
 * keeps no schedstat, the ticks.
 */
export function processCpuSeconds(pid: number): number {
  try {
    let nanoseconds = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) nanoseconds += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    if (Number.isFinite(nanoseconds)) return nanoseconds / 1e9;
  } catch {
    // Gone, or no schedstat: the ticks below.
  }
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return 0;
  }
  // The fields after the command name, which may itself hold spaces: utime and stime are the 12th and 13th.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** The processes `pid` started (each of its threads' children, /proc/<pid>/task/<tid>/children); none once it is gone. */
export function childPids(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) => readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").split(" ").filter(Boolean).map(Number));
  } catch {
    return [];
  }
}

/** The processes whose command line matches: Elasticsearch's JVM, PostgreSQL's server processes. */
export function processesMatching(pattern: RegExp): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (pattern.test(readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " "))) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** The machine's CPU time so far (/proc/stat, every core): busy and total, in ticks. */
export function machineCpu(): { busy: number; total: number } {
  const ticks = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = ticks.reduce((sum, t) => sum + t, 0);
  // idle and iowait
  return { busy: total - ticks[3]! - ticks[4]!, total };
}

type CpuPart = "service" | "postgres" | "elasticsearch" | "bench";

export interface CpuUse {
  /** % of one core, per part: the service, PostgreSQL (every server process), Elasticsearch, this bench. */
  parts: Record<CpuPart, number>;
  /** The same as CPU seconds. */
  seconds: Record<CpuPart, number>;
  /** The whole machine, % of all cores. */
  machineBusyPct: number;
}

/**
 * Measures CPU use from now until the returned function is called. PostgreSQL's processes are
 * listed at both ends (connections come and go), so a backend that both started and ended in
 * between is not counted.
 */
export function startCpuMeter(servicePid: number): () => CpuUse {
  const postgres = () => processesMatching(/^postgres[: ]/);
  const elasticsearch = processesMatching(/org\.elasticsearch\.bootstrap\.Elasticsearch/);
  const read = (pids: number[]) => new Map(pids.map((pid) => [pid, processCpuSeconds(pid)]));
  const before = { postgres: read(postgres()), elasticsearch: read(elasticsearch), service: processCpuSeconds(servicePid), bench: process.cpuUsage(), machine: machineCpu(), at: Date.now() };
  const grown = (start: Map<number, number>, pids: number[]) =>
    pids.reduce((sum, pid) => {
      const now = processCpuSeconds(pid);
      return now === 0 ? sum : sum + now - (start.get(pid) ?? 0);
    }, 0);
  return () => {
    const seconds = (Date.now() - before.at) / 1000;
    const pct = (cpuSeconds: number) => Math.round((cpuSeconds / seconds) * 100);
    const bench = process.cpuUsage(before.bench);
    const machine = machineCpu();
    const used: Record<CpuPart, number> = {
      service: processCpuSeconds(servicePid) - before.service,
      postgres: grown(before.postgres, [...new Set([...before.postgres.keys(), ...postgres()])]),
      elasticsearch: grown(before.elasticsearch, elasticsearch),
      bench: (bench.user + bench.system) / 1e6,
    };
    return {
      parts: { service: pct(used.service), postgres: pct(used.postgres), elasticsearch: pct(used.elasticsearch), bench: pct(used.bench) },
      seconds: used,
      machineBusyPct: Math.round(((machine.busy - before.machine.busy) / (machine.total - before.machine.total)) * 100),
    };
  };
}
