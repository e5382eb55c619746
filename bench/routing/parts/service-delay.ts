// The service's own event-loop delay over a phase of bench:routing, from its /metrics (prom-client's
// nodejs_eventloop_lag_*, whose histogram restarts at each scrape): the model servers of the
// simulated marketplace run in the service's process, so a delayed loop delays every prefill and
// every token, and adds the same milliseconds to both endpoints' time to first token. A p90 goal
// that compares milliseconds of prefill is hidden by delays of as many: this says when that is so.
import { metricSample } from "../../shared/support.js";

/** The sampling interval of prom-client's monitor, which its readings include, s. */
const RESOLUTION_S = 0.01;

export interface LoopDelay {
  /** Beyond the monitor's interval, ms. */
  p99Ms: number;
  maxMs: number;
}

/** Reads the service's metrics: the delay since the last reading (the first one starts the phase). */
export async function readLoopDelay(serviceUrl: string): Promise<LoopDelay | undefined> {
  try {
    const text = await (await fetch(`${serviceUrl}/metrics`)).text();
    const seconds = (name: string) => metricSample(text, `nodejs_eventloop_lag_${name}_seconds`) ?? NaN;
    const beyond = (s: number) => Math.max(0, (s - RESOLUTION_S) * 1000);
    const p99 = seconds("p99");
    const max = seconds("max");
    return Number.isFinite(p99) && Number.isFinite(max) ? { p99Ms: beyond(p99), maxMs: beyond(max) } : undefined;
  } catch {
    return undefined;
  }
}

export function describeLoopDelay(delay: LoopDelay | undefined): string {
  if (delay === undefined) return "the service's event-loop delay: not reported by its /metrics";
  return `the service's event-loop delay over the phase (its model servers run in it): p99 ${delay.p99Ms.toFixed(1)} ms, max ${delay.maxMs.toFixed(1)} ms`;
}
