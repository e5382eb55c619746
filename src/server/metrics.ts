import { collectDefaultMetrics, Counter, Histogram, Registry } from "prom-client";
import { Code, ConnectError, type Interceptor as ConnectInterceptor } from "@connectrpc/connect";
import { CountedCounter, CountedHistogram } from "./counted-metrics.js";

/**
 * The Prometheus registry of the process, served at GET /metrics. Services register their own
 * metrics on `registry` (indexing throughput, batch outcomes, instances by status, lock state).
 */
export interface Metrics {
  readonly registry: Registry;
  /** Records one REST or health request by route pattern, never by raw path (bounded labels). */
  observeHttp(route: string, method: string, status: number, seconds: number): void;
  /** Counts and times RPCs (Connect, gRPC, gRPC-Web) by method and code. */
  readonly rpcInterceptor: ConnectInterceptor;
}

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // Counted on every request: counted-metrics.ts.
  const httpRequests = new CountedCounter({
    name: "http_requests_total",
    help: "REST and health requests by route pattern, method and status",
    labelNames: ["route", "method", "status"],
    registers: [registry],
  });
  const httpDuration = new CountedHistogram({
    name: "http_request_duration_seconds",
    help: "REST and health request latency by route pattern",
    labelNames: ["route", "method"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const rpcRequests = new Counter({
    name: "rpc_requests_total",
    help: "RPCs by service, method and Connect code",
    labelNames: ["service", "method", "code"],
    registers: [registry],
  });
  const rpcDuration = new Histogram({
    name: "rpc_request_duration_seconds",
    help: "RPC latency by service and method",
    labelNames: ["service", "method"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });

  return {
    registry,
    observeHttp(route, method, status, seconds) {
      httpRequests.labels(route, method, String(status)).inc();
      httpDuration.labels(route, method).observe(seconds);
    },
    rpcInterceptor: (next) => async (req) => {
      const labels = { service: req.service.typeName, method: req.method.name };
      const started = process.hrtime.bigint();
      let code = "ok";
      try {
        return await next(req);
      } catch (err) {
        code = snakeCase(Code[ConnectError.from(err).code] ?? "unknown");
        throw err;
      } finally {
        rpcRequests.inc({ ...labels, code });
        rpcDuration.observe(labels, Number(process.hrtime.bigint() - started) / 1e9);
      }
    },
  };
}


function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c, i: number) => (i === 0 ? "" : "_") + c.toLowerCase());
}
