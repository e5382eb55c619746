// npm run bench:serve, the figures: machine-hours and dollars from the service's own instance
// records (gpu_instances rows of each endpoint: cost_per_hour x their life from created_at to
// destroyed_at, or to the end of the day), clipped to the day and converted to simulated hours;
// the endpoints' events per simulated hour; the proxy's held requests, and its streamed answers
// continued on another replica (with the time from the cut to the continued token) or cut with
// an error event, from /metrics.
import type { Knex } from "knex";
import { DAY_S } from "./serve-day.js";

export interface MachineRecord {
  instanceId: string;
  costPerHour: number;
  interruptible: boolean;
  createdAt: number;
  destroyedAt: number | null;
  preemptedAt: number | null;
}

export async function machinesOf(knex: Knex, endpoint: string): Promise<MachineRecord[]> {
  const rows = (await knex("gpu_instances")
    .where({ endpoint })
    .select("instance_id", "cost_per_hour", "interruptible", "created_at", "destroyed_at", "preempted_at")) as Array<{
    instance_id: string;
    cost_per_hour: number;
    interruptible: boolean;
    created_at: Date;
    destroyed_at: Date | null;
    preempted_at: Date | null;
  }>;
  return rows.map((r) => ({
    instanceId: r.instance_id,
    costPerHour: Number(r.cost_per_hour),
    interruptible: r.interruptible,
    createdAt: r.created_at.getTime(),
    destroyedAt: r.destroyed_at?.getTime() ?? null,
    preemptedAt: r.preempted_at?.getTime() ?? null,
  }));
}

/** The day in wall time (epoch ms) and its compression. */
export interface DayWindow {
  startMs: number;
  endMs: number;
  factor: number;
}

/** Simulated hours of [fromMs, toMs) that fall inside [a, b) (wall epoch ms). */
function simHoursWithin(window: DayWindow, fromMs: number, toMs: number, a = window.startMs, b = window.endMs): number {
  const ms = Math.max(0, Math.min(toMs, b) - Math.max(fromMs, a));
  return (ms / 3_600_000) * window.factor;
}

export interface Money {
  machineHours: number;
  dollars: number;
  machines: number;
  interruptibleMachines: number;
  /** The most machines billed at one moment of the day. */
  mostAtOnce: number;
  /** Machine-hours per simulated hour of the day (the mean number of machines in that hour). */
  byHour: number[];
}

export function moneyOf(records: readonly MachineRecord[], window: DayWindow): Money {
  const end = (r: MachineRecord) => r.destroyedAt ?? window.endMs;
  const inDay = records.filter((r) => end(r) > window.startMs && r.createdAt < window.endMs);
  const hourMs = ((DAY_S / 24) * 1000) / window.factor;
  const byHour = Array.from({ length: 24 }, (_, h) =>
    inDay.reduce((sum, r) => sum + simHoursWithin(window, r.createdAt, end(r), window.startMs + h * hourMs, window.startMs + (h + 1) * hourMs), 0),
  );
  // A sweep over the rentals and ends: the most machines alive at once.
  const edges = inDay.flatMap((r) => [
    [Math.max(r.createdAt, window.startMs), 1],
    [Math.min(end(r), window.endMs), -1],
  ]);
  edges.sort((x, y) => x[0]! - y[0]! || x[1]! - y[1]!);
  let alive = 0;
  let mostAtOnce = 0;
  for (const [, step] of edges) mostAtOnce = Math.max(mostAtOnce, (alive += step!));
  return {
    machineHours: inDay.reduce((sum, r) => sum + simHoursWithin(window, r.createdAt, end(r)), 0),
    dollars: inDay.reduce((sum, r) => sum + r.costPerHour * simHoursWithin(window, r.createdAt, end(r)), 0),
    machines: inDay.length,
    interruptibleMachines: inDay.filter((r) => r.interruptible).length,
    mostAtOnce,
    byHour,
  };
}

export const TIMELINE_KINDS = ["scaled", "woke", "idle", "preempted", "fallback", "launched", "ended"] as const;

/** The endpoint's events of the day, counted per kind and simulated hour. */
export async function eventsByHour(knex: Knex, endpoint: string, window: DayWindow): Promise<Map<string, number[]>> {
  const rows = (await knex("gpu_endpoint_events as e")
    .join("gpu_endpoints as p", "p.id", "e.endpoint_id")
    .where("p.name", endpoint)
    .select("e.at", "e.kind")) as Array<{ at: Date; kind: string }>;
  const counts = new Map<string, number[]>();
  for (const row of rows) {
    const simS = ((row.at.getTime() - window.startMs) / 1000) * window.factor;
    if (simS < 0 || simS >= DAY_S) continue;
    const hours = counts.get(row.kind) ?? Array.from({ length: 24 }, () => 0);
    hours[Math.floor(simS / 3_600)]! += 1;
    counts.set(row.kind, hours);
  }
  return counts;
}

/** Requests the proxy held for the endpoint (gpu_endpoint_hold_seconds' count and sum, this process). */
export function heldOf(metrics: string, endpoint: string): { count: number; seconds: number } {
  const read = (suffix: string) => Number(new RegExp(`^gpu_endpoint_hold_seconds_${suffix}\\{endpoint="${endpoint}"\\} (\\S+)`, "m").exec(metrics)?.[1] ?? 0);
  return { count: read("count"), seconds: read("sum") };
}

/** Streamed answers continued and cut (by reason), and the time to continue (p50, p99, s) from the gpu_endpoint_resume_seconds buckets. */
export function continuationsOf(metrics: string, endpoint: string): { resumed: number; cut: Map<string, number>; p50: number; p99: number } {
  const sample = (name: string) => new RegExp(`^${name}\\{endpoint="${endpoint}"(?:,reason="([a-z_]+)")?\\} (\\S+)`, "gm");
  const resumed = Number(sample("gpu_endpoint_streams_resumed_total").exec(metrics)?.[2] ?? 0);
  const cut = new Map<string, number>();
  for (const m of metrics.matchAll(sample("gpu_endpoint_streams_cut_total"))) cut.set(m[1]!, Number(m[2]));
  const buckets = [...metrics.matchAll(new RegExp(`^gpu_endpoint_resume_seconds_bucket\\{le="([^"]+)",endpoint="${endpoint}"\\} (\\S+)`, "gm"))].map((m) => ({
    le: m[1] === "+Inf" ? Infinity : Number(m[1]),
    count: Number(m[2]),
  }));
  return { resumed, cut, p50: bucketQuantile(buckets, 0.5), p99: bucketQuantile(buckets, 0.99) };
}

/** A quantile from cumulative histogram buckets, interpolated within its bucket (as Prometheus' histogram_quantile). */
function bucketQuantile(buckets: Array<{ le: number; count: number }>, q: number): number {
  const total = buckets.at(-1)?.count ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const { le, count } of buckets) {
    if (count >= rank) return le === Infinity ? lower : lower + ((le - lower) * (rank - below)) / Math.max(1, count - below);
    lower = le;
    below = count;
  }
  return lower;
}
