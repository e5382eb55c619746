// @ts-check
// Indexing: the alias, documents, eligible rows and drift, the live follower and its oldest
// pending change, the last runs and batch logs, as the status route gives them. With the search
// engine away it says so and how to start one, rather than showing an error.

import { ApiError, get } from "./api.js";
import { duration, escape, figures, notice, state, table, time } from "./format.js";

/** @param {HTMLElement} main @param {import("./app.js").Shell} shell */
export function mountIndexing(main, shell) {
  main.innerHTML = `<h1>Indexing</h1><div id="ix-status"></div><h2>Last runs</h2><div id="ix-runs"></div><h2>Batch logs</h2><div id="ix-logs"></div>`;
  // A refresh that ends after the reader moved on writes into nothing.
  const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (main.querySelector(`#${id}`) ?? document.createElement("div"));
  const away = () =>
    notice(
      `The search engine is not reachable (unavailable), so there is nothing to show yet. Start Elasticsearch 8 with <code>npm run elasticsearch -- start</code> (or point <code>ELASTICSEARCH_URL</code> at one), then load goods with <code>curl -X POST ${escape(location.origin)}/api/search/v1/batch/product</code>. This page tries again every 5 s.`,
    );
  return {
    async refresh() {
      const [status, logs] = await Promise.allSettled([get("/api/search/v1/index/db/goods/status"), get("/api/search/v1/batch/logs?limit=10")]);
      const failed = [status, logs].find((r) => r.status === "rejected");
      shell.report("indexing", failed?.reason);
      if (status.status === "rejected") {
        const error = status.reason;
        $("ix-status").innerHTML = error instanceof ApiError && error.status === 503 ? away() : notice(`The index status cannot be read now: ${escape(error.message)}`, "bad");
        $("ix-runs").innerHTML = "";
        $("ix-logs").innerHTML = "";
        return;
      }
      const s = status.value;
      const live = s.live ?? {};
      $("ix-status").innerHTML =
        figures([
          ["Alias", escape(s.alias)],
          ["Index", escape(s.physical_index || "none yet")],
          ["Documents", String(s.document_count)],
          ["Eligible rows", String(s.eligible_rows)],
          ["Pending rows", String(s.pending_rows)],
          ["Drift", String(s.drift)],
          ["Live changes", live.enabled ? state(live.state) : state("off")],
          ["Oldest pending change", live.pending_products > 0 ? duration(Number(live.oldest_pending_age_ms)) : "none"],
        ]) + (s.document_count === 0 && s.eligible_rows === 0 ? notice(`The index is empty. Load goods with <code>curl -X POST ${escape(location.origin)}/api/search/v1/batch/product</code>.`) : "");
      $("ix-runs").innerHTML = table(
        ["Mode", "Result", "Started", "Finished", "Fetched", "Indexed", "Failed", "Removed", "By"],
        s.last_runs ?? [],
        (/** @type {any} */ r) => [escape(r.mode), state(r.success ? "success" : "failed"), escape(time(r.started_at)), escape(time(r.finished_at)), String(r.fetched_count), String(r.indexed_count), String(r.failed_count), String(r.removed_count), escape(r.actor ?? "")],
        "No runs yet.",
      );
      $("ix-logs").innerHTML =
        logs.status === "rejected"
          ? notice(`Batch logs cannot be read now: ${escape(logs.reason.message)}`)
          : table(
              ["Batch", "Status", "Started", "Elapsed", "By"],
              logs.value.logs ?? [],
              (/** @type {any} */ l) => [escape(l.batch_id), state(l.status), escape(time(l.started_at)), duration(l.elapsed_ms), escape(l.actor ?? "")],
              "No batch has run yet.",
            );
    },
  };
}
