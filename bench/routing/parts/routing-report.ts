// bench:routing's printout: per workload, the two endpoints side by side (hit rate, time to first
// token, answers a second, answers per replica), then the goals as verdicts.
import { printTable } from "../../shared/support.js";

export interface PhaseFigures {
  answers: number;
  failed: number;
  ttftMs: number[];
  seconds: number;
  /** Answers per replica, by instance id. */
  byReplica: Map<string, number>;
  /** The endpoint's replicas' prefix-cache hits over queries during the phase. */
  hitRate: number;
}

export type Routing = "prefix" | "least_outstanding";

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export function printPhase(title: string, figures: Record<Routing, PhaseFigures>): void {
  const routings = Object.keys(figures) as Routing[];
  const row = (label: string, cell: (f: PhaseFigures) => string) => [label, ...routings.map((r) => cell(figures[r]))];
  console.log(`\n${title}\n`);
  printTable([
    ["", ...routings],
    row("prefix-cache hit rate (replicas' counters)", (f) => f.hitRate.toFixed(2)),
    row("time to first token p50 / p90, ms", (f) => `${percentile(f.ttftMs, 50).toFixed(1)} / ${percentile(f.ttftMs, 90).toFixed(1)}`),
    row("answers / s", (f) => (f.answers / f.seconds).toFixed(1)),
    row("answers per replica", (f) => [...f.byReplica.values()].sort((a, b) => b - a).join(" ")),
    row("failed", (f) => String(f.failed)),
  ]);
}

const verdict = (ok: boolean) => (ok ? "met" : "MISSED");

/** (a): prefix's p90 at most half of least_outstanding's, with a hit rate of at least 0.7. */
export function sharedPrefixVerdict(f: Record<Routing, PhaseFigures>): string {
  const ratio = percentile(f.prefix.ttftMs, 90) / percentile(f.least_outstanding.ttftMs, 90);
  return `goal (a): prefix's p90 time to first token <= 0.5x least_outstanding's: ${ratio.toFixed(2)}x ${verdict(ratio <= 0.5)}; its hit rate >= 0.7: ${f.prefix.hitRate.toFixed(2)} ${verdict(f.prefix.hitRate >= 0.7)}`;
}

/** (b): prefix within 5% of least_outstanding, time to first token (p90) and answers a second alike. */
export function unsharedVerdict(f: Record<Routing, PhaseFigures>): string {
  const ttft = percentile(f.prefix.ttftMs, 90) / percentile(f.least_outstanding.ttftMs, 90);
  const rate = f.prefix.answers / f.prefix.seconds / (f.least_outstanding.answers / f.least_outstanding.seconds);
  return `goal (b): prefix within 5% of least_outstanding: p90 time to first token ${ttft.toFixed(3)}x ${verdict(ttft <= 1.05)}, answers / s ${rate.toFixed(3)}x ${verdict(rate >= 0.95)}`;
}
