import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { CountedCounter, CountedHistogram } from "../../src/server/counted-metrics.js";

// The counted metrics stand in for prom-client's counter and histogram on the request paths: a
// scrape must read exactly what prom-client's own would have published for the same counts.

const BUCKETS = [0, 0.1, 0.25, 0.5, 1, 2.5];

function both() {
  const theirs = new Registry();
  const ours = new Registry();
  const config = (registry: Registry) => ({ name: "things_total", help: "Things, by kind and code", labelNames: ["kind", "code"], registers: [registry] });
  const histogram = (registry: Registry) => ({ name: "thing_seconds", help: "How long things took", labelNames: ["kind"], buckets: BUCKETS, registers: [registry] });
  return {
    theirs,
    ours,
    counters: [new Counter(config(theirs)), new CountedCounter(config(ours))] as const,
    histograms: [new Histogram(histogram(theirs)), new CountedHistogram(histogram(ours))] as const,
  };
}

describe("counted metrics", () => {
  it("publish what prom-client's counter and histogram publish for the same counts", async () => {
    const { theirs, ours, counters, histograms } = both();
    // Values on the bounds, between them, below the first and above the last; label values that need escaping.
    const observations: Array<[string, number]> = [
      ["a", 0],
      ["a", 0.1],
      ["a", 0.1000001],
      ["b", 3],
      ["b", -1],
      ['q"uo\\te', 0.3],
      ["a", 2.5],
      ["b", 0.75],
    ];
    for (const [kind, seconds] of observations) {
      const code = seconds > 1 ? "500" : "200";
      counters[0].labels(kind, code).inc();
      counters[1].labels(kind, code).inc();
      histograms[0].labels(kind).observe(seconds);
      histograms[1].labels(kind).observe(seconds);
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());
    // As JSON too, but for prom-client's exemplars, which these do not keep.
    const withoutExemplars = (metrics: Array<{ values: object[] }>) => metrics.map((m) => ({ ...m, values: m.values.map(({ exemplar: _, ...value }: { exemplar?: unknown }) => value) }));
    expect(withoutExemplars(await ours.getMetricsAsJSON())).toEqual(withoutExemplars(await theirs.getMetricsAsJSON()));
  });

  it("publish nothing but their help and type before the first count", async () => {
    const { theirs, ours } = both();
    expect(await ours.metrics()).toBe(await theirs.metrics());
  });

  it("forget every label set on the registry's reset, and count anew after it, as prom-client does", async () => {
    const { theirs, ours, counters } = both();
    for (const counter of counters) {
      counter.labels("a", "200").inc();
      counter.labels("a", "500").inc();
    }
    theirs.resetMetrics();
    ours.resetMetrics();
    expect(await ours.metrics()).toBe(await theirs.metrics());
    for (const counter of counters) counter.labels("a", "500").inc();
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).toContain('things_total{kind="a",code="500"} 1');
  });

  it("refuse a label set of the wrong size and a value that is not a finite number, as prom-client does", () => {
    const { histograms, counters } = both();
    expect(() => counters[1].labels("a")).toThrow(/2 label values expected, 1 given/);
    // Also once a label set beginning with the same value is counted.
    counters[1].labels("a", "200").inc();
    expect(() => counters[1].labels("a")).toThrow(/2 label values expected, 1 given/);
    expect(() => counters[1].labels("a", "200", "x")).toThrow(/2 label values expected, 3 given/);
    expect(() => histograms[1].labels("a").observe(Number.NaN)).toThrow(TypeError);
    expect(() => histograms[0].labels("a").observe(Number.NaN)).toThrow();
  });
});
