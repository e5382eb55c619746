// The part of autocannon's API this benchmark uses (the package ships no type declarations).
declare module "autocannon" {
  interface Options {
    url: string;
    method?: string;
    body?: string;
    headers?: Record<string, string>;
    connections?: number;
    duration?: number;
    workers?: number;
    /** At most this many requests a second over every connection (per worker). */
    overallRate?: number;
    /** Requests each connection cycles through, against `url`'s origin. */
    requests?: Array<{ method?: string; path: string; body?: string; headers?: Record<string, string> }>;
  }
  interface Histogram {
    average: number;
    p50: number;
    p99: number;
  }
  interface Result {
    latency: Histogram;
    errors: number;
    timeouts: number;
    non2xx: number;
    /** Requests per second, with the total completed; the run's length in seconds. */
    requests: Histogram & { total: number };
    duration: number;
  }
  /** A running benchmark: awaitable for its result, `stop()` ends it early. */
  type Instance = Promise<Result> & { stop(): void };
  function autocannon(options: Options): Instance;
  export default autocannon;
}
