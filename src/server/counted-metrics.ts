import type { Metric, Registry } from "prom-client";

// Metrics counted on every request. prom-client hashes a sample's labels on every call (their
// names sorted and joined), even through a label set's child; these keep each label set's child,
// found by its values in order, counting in plain numbers, and give the registry the samples
// prom-client's own counter and histogram give at scrape time. The label sets are few (endpoint
// names, routes, methods, statuses), so they are never dropped.

interface CountedConfig {
  name: string;
  help: string;
  labelNames: readonly string[];
  registers: Registry[];
}

interface Sample {
  labels: Record<string, string | number>;
  value: number;
  metricName?: string;
}

/** What a registry reads of a metric (prom-client's MetricObjectWithValues). */
interface Collected {
  name: string;
  help: string;
  type: string;
  aggregator: "sum";
  values: Sample[];
}

/** The label sets' children of one metric, made once each; the labels in labelNames' order. */
abstract class CountedMetric<Child> {
  readonly name: string;
  readonly help: string;
  abstract readonly type: string;
  readonly aggregator = "sum";
  protected readonly children: Array<{ labels: Record<string, string>; child: Child }> = [];
  /**
   * The children by their label values, a map per label: the first value's map holds the second
   * value's, and so on. Found without making a key of the values (a string per call, hashed anew).
   */
  private readonly byValues = new Map<string, unknown>();

  constructor(private readonly config: CountedConfig) {
    this.name = config.name;
    this.help = config.help;
    for (const registry of config.registers) registry.registerMetric(this as unknown as Metric);
  }

  /** The child of the label set with these values, in labelNames' order. */
  labels(...values: string[]): Child {
    if (values.length !== this.config.labelNames.length) throw new Error(`${this.name}: ${this.config.labelNames.length} label values expected, ${values.length} given`);
    let level = this.byValues;
    const last = values.length - 1;
    for (let i = 0; i < last; i++) {
      let next = level.get(values[i]!) as Map<string, unknown> | undefined;
      if (next === undefined) level.set(values[i]!, (next = new Map()));
      level = next;
    }
    let child = level.get(values[last]!) as Child | undefined;
    if (child === undefined) {
      const labels = Object.fromEntries(this.config.labelNames.map((name, i) => [name, values[i]!]));
      child = this.child();
      this.children.push({ labels, child });
      level.set(values[last]!, child);
    }
    return child;
  }

  async get(): Promise<Collected> {
    const values: Sample[] = [];
    for (const { labels, child } of this.children) this.samples(labels, child, values);
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** Forgets every label set (the registry's resetMetrics). */
  reset(): void {
    this.children.length = 0;
    this.byValues.clear();
  }

  protected abstract child(): Child;
  protected abstract samples(labels: Record<string, string>, child: Child, into: Sample[]): void;
}

export interface CountedCounterChild {
  inc(): void;
}

/** A counter (prom-client's Counter's samples). */
export class CountedCounter extends CountedMetric<CountedCounterChild & { value: number }> {
  readonly type = "counter";

  protected child(): CountedCounterChild & { value: number } {
    return {
      value: 0,
      inc() {
        this.value += 1;
      },
    };
  }

  protected samples(labels: Record<string, string>, child: { value: number }, into: Sample[]): void {
    into.push({ labels, value: child.value });
  }
}

export interface CountedHistogramChild {
  observe(value: number): void;
}

interface HistogramCounts extends CountedHistogramChild {
  /** Observations per bucket, not added up; the last: above every bound. */
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

/** A histogram (prom-client's Histogram's samples: cumulative buckets, +Inf, sum and count). */
export class CountedHistogram extends CountedMetric<HistogramCounts> {
  readonly type = "histogram";
  private readonly bounds: readonly number[];

  constructor(config: CountedConfig & { buckets: readonly number[] }) {
    super(config);
    this.bounds = [...config.buckets].sort((a, b) => a - b);
  }

  protected child(): HistogramCounts {
    const bounds = this.bounds;
    const name = this.name;
    return {
      counts: new Float64Array(bounds.length + 1),
      sum: 0,
      count: 0,
      observe(value: number) {
        if (!Number.isFinite(value)) throw new TypeError(`${name}: value is not a finite number: ${value}`);
        let bucket = 0;
        while (bucket < bounds.length && value > bounds[bucket]!) bucket++;
        this.counts[bucket] = this.counts[bucket]! + 1;
        this.sum += value;
        this.count += 1;
      },
    };
  }

  protected samples(labels: Record<string, string>, child: HistogramCounts, into: Sample[]): void {
    const bucketName = `${this.name}_bucket`;
    let below = 0;
    this.bounds.forEach((bound, i) => {
      below += child.counts[i]!;
      into.push({ labels: { le: bound, ...labels }, value: below, metricName: bucketName });
    });
    into.push({ labels: { le: "+Inf", ...labels }, value: child.count, metricName: bucketName });
    into.push({ labels, value: child.sum, metricName: `${this.name}_sum` });
    into.push({ labels, value: child.count, metricName: `${this.name}_count` });
  }
}
