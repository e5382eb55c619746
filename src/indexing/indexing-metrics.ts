import { Counter, Gauge, type Registry } from "prom-client";
import type { IndexDrift } from "./goods/index-status.js";
import type { JobLock } from "./job-lock.js";

/** What the indexing runs and the batch report to Prometheus. */
export interface IndexingMetrics {
  runSucceeded(result: { mode: string; indexedCount: number; failedCount: number; removedCount: number; elapsedMs: number }): void;
  runFailed(mode: string, code: string): void;
  /** The drift figures as last measured (end of a run, or a status request). */
  driftMeasured(drift: IndexDrift): void;
  batchFinished(status: string): void;
}

/**
 * indexing_runs_total{mode,outcome}, indexing_documents_total{mode,result} (indexed or failed),
 * indexing_last_run_docs_per_second{mode}, batch_runs_total{status}, indexing_job_running{job}
 * (1 while that job holds the job lock in this process), and the drift figures as last measured:
 * goods_index_documents, goods_index_eligible_rows, goods_index_pending_rows, goods_index_drift.
 */
export function createIndexingMetrics(registry: Registry, jobLock: Pick<JobLock, "current">): IndexingMetrics {
  const runs = new Counter({
    name: "indexing_runs_total",
    help: "Indexing runs by mode and outcome: ok, or the error code (e.g. BULK_FAILED, UNAVAILABLE, INTERNAL)",
    labelNames: ["mode", "outcome"],
    registers: [registry],
  });
  const documents = new Counter({
    name: "indexing_documents_total",
    help: "Documents indexed, failed or removed, by mode",
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

  const driftGauges = {
    documentCount: gauge(registry, "goods_index_documents", "Documents in the goods index, as last measured"),
    eligibleRows: gauge(registry, "goods_index_eligible_rows", "Rows with USE_YN='Y', as last measured"),
    pendingRows: gauge(registry, "goods_index_pending_rows", "Rows with USE_YN='Y' and INDEX_YN='N', as last measured"),
    drift: gauge(registry, "goods_index_drift", "Eligible rows minus documents in the goods index, as last measured"),
  };

  return {
    runSucceeded({ mode, indexedCount, failedCount, removedCount, elapsedMs }) {
      runs.inc({ mode, outcome: "ok" });
      documents.inc({ mode, result: "indexed" }, indexedCount);
      documents.inc({ mode, result: "failed" }, failedCount);
      documents.inc({ mode, result: "removed" }, removedCount);
      rate.set({ mode }, elapsedMs > 0 ? (indexedCount * 1000) / elapsedMs : 0);
    },
    runFailed(mode, code) {
      runs.inc({ mode, outcome: code });
    },
    batchFinished(status) {
      batches.inc({ status });
    },
    driftMeasured(measured) {
      driftGauges.documentCount.set(measured.documentCount);
      driftGauges.eligibleRows.set(measured.eligibleRows);
      driftGauges.pendingRows.set(measured.pendingRows);
      driftGauges.drift.set(measured.drift);
    },
  };
}

function gauge(registry: Registry, name: string, help: string): Gauge {
  return new Gauge({ name, help, registers: [registry] });
}
