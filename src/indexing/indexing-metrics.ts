import { Counter, Gauge, type Registry } from "prom-client";
import type { JobLock } from "./job-lock.js";

/** What the indexing runs and the batch report to Prometheus. */
export interface IndexingMetrics {
  runSucceeded(result: { mode: string; indexedCount: number; failedCount: number; elapsedMs: number }): void;
  runFailed(mode: string, code: string): void;
  batchFinished(status: string): void;
}

/**
 * indexing_runs_total{mode,outcome}, indexing_documents_total{mode,result} (indexed or failed),
 * indexing_last_run_docs_per_second{mode}, batch_runs_total{status}, and indexing_job_running{job}
 * (1 while that job holds the job lock in this process).
 */
export function createIndexingMetrics(registry: Registry, jobLock: Pick<JobLock, "current">): IndexingMetrics {
  const runs = new Counter({
    name: "indexing_runs_total",
    help: "Indexing runs by mode and outcome (ok, or the error code)",
    labelNames: ["mode", "outcome"],
    registers: [registry],
  });
  const documents = new Counter({
    name: "indexing_documents_total",
    help: "Documents indexed or failed, by mode",
    labelNames: ["mode", "result"],
    registers: [registry],
  });
  const rate = new Gauge({
    name: "indexing_last_run_docs_per_second",
    help: "Documents per second of the last successful run, by mode",
    labelNames: ["mode"],
    registers: [registry],
  });
  const batches = new Counter({
    name: "batch_runs_total",
    help: "Product batch executions by final status",
    labelNames: ["status"],
    registers: [registry],
  });
  new Gauge({
    name: "indexing_job_running",
    help: "1 while the named job holds the job lock in this process",
    labelNames: ["job"],
    registers: [registry],
    collect() {
      this.reset();
      const current = jobLock.current();
      if (current) this.set({ job: current.jobName }, 1);
    },
  });

  return {
    runSucceeded({ mode, indexedCount, failedCount, elapsedMs }) {
      runs.inc({ mode, outcome: "ok" });
      documents.inc({ mode, result: "indexed" }, indexedCount);
      documents.inc({ mode, result: "failed" }, failedCount);
      rate.set({ mode }, elapsedMs > 0 ? (indexedCount * 1000) / elapsedMs : 0);
    },
    runFailed(mode, code) {
      runs.inc({ mode, outcome: code });
    },
    batchFinished(status) {
      batches.inc({ status });
    },
  };
}
