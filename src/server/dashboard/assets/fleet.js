// @ts-check
// The fleet: what it costs now, over the last 24 hours and 7 days ($/h over time with the running
// total, from the instance records), its endpoints, and its instances.

import { ApiError, get } from "./api.js";
import { series, timeChart } from "./charts.js";
import { mountFleetMarkets } from "./fleet-markets.js";
import { escape, figures, onWindowChosen, windowButtons, money, notice, perHour, state, table, time } from "./format.js";

const HOUR = 3_600_000;
const WINDOWS = { "24 h": { ms: 24 * HOUR, step: 60 }, "7 d": { ms: 7 * 24 * HOUR, step: 420 } };

/** @param {HTMLElement} main @param {import("./app.js").Shell} shell */
export function mountFleet(main, shell) {
  /** @type {keyof typeof WINDOWS} */
  let window = "24 h";
  main.innerHTML = `<h1>Fleet</h1><div id="fleet-figures"></div>
    <h2>Spend</h2>${windowButtons(Object.keys(WINDOWS), window)}<div class="charts" id="fleet-charts"></div>
    <h2>Endpoints</h2><div id="fleet-endpoints"></div>
    <h2>Markets</h2><div id="fleet-markets"></div>
    <h2>Instances</h2><div id="fleet-instances"></div>`;
  // A refresh that ends after the reader moved on writes into nothing.
  const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (main.querySelector(`#${id}`) ?? document.createElement("div"));
  const chart = timeChart($("fleet-charts"), {
    title: "Fleet $/h and its running total",
    y: "$/h",
    y2: "$ since the window's start",
    lines: [
      { label: "$/h", stroke: "#0969da" },
      { label: "total $", stroke: "#bf8700", dash: [6, 4], scale: "y2" },
    ],
  });
  const markets = mountFleetMarkets($("fleet-markets"));
  let refresh = async () => {};
  onWindowChosen(main, (name) => {
    window = /** @type {keyof typeof WINDOWS} */ (name);
    void refresh();
  });
  const since = (/** @type {number} */ ms) => new Date(Date.now() - ms).toISOString();

  refresh = async () => {
    // The totals need only their last point: one step as long as their window.
    const [instances, endpoints, chosen, day, week] = await Promise.allSettled([
      get("/api/gpu/instances?limit=100"),
      get("/api/gpu/endpoints"),
      get(`/api/gpu/spend?from=${since(WINDOWS[window].ms)}&step_s=${WINDOWS[window].step}`),
      get(`/api/gpu/spend?from=${since(WINDOWS["24 h"].ms)}&step_s=86400`),
      get(`/api/gpu/spend?from=${since(WINDOWS["7 d"].ms)}&step_s=604800`),
    ]);
    const failed = [instances, endpoints, chosen, day, week].find((r) => r.status === "rejected");
    shell.report("the fleet", failed?.reason);
    if (failed) {
      const error = failed.reason;
      const why = error instanceof ApiError && error.status === 503 ? "The database is not reachable: the service answers again once it is back." : escape(String(error.message ?? error));
      $("fleet-figures").innerHTML = notice(`The fleet cannot be read now. ${why}`, "bad");
      return;
    }
    const [list, eps, spend, d, w] = /** @type {any[]} */ ([instances, endpoints, chosen, day, week].map((r) => /** @type {PromiseFulfilledResult<any>} */ (r).value));
    const now = d.points.at(-1);
    $("fleet-figures").innerHTML =
      figures([
        ["Now", perHour(now?.cost_per_hour)],
        ["Last 24 hours", money(d.points.at(-1)?.total_cost)],
        ["Last 7 days", money(w.points.at(-1)?.total_cost)],
        ["Instances", String(list.count)],
      ]) +
      (list.count === 0 && eps.endpoints.length === 0
        ? notice(
            `No machines yet. Start with an endpoint: <code>curl -X POST ${escape(location.origin)}/api/gpu/endpoints -H 'content-type: application/json' -d '{"name":"chat","template_name":"budget","replicas":1,"max_cost_per_hour":1}'</code>, then send requests to <code>/endpoints/chat/v1/chat/completions</code>. Charts fill in as machines bill.`,
          )
        : "");
    const { xs, ys } = series(spend.points, (/** @type {any} */ p) => p.at, spend.step_s, [(/** @type {any} */ p) => p.cost_per_hour, (/** @type {any} */ p) => p.total_cost]);
    chart.update(xs, ys);
    $("fleet-endpoints").innerHTML = table(
      ["Endpoint", "State", "Ready / target", "On-demand / interruptible", "$/h"],
      eps.endpoints,
      (/** @type {any} */ e) => [
        `<a href="/dashboard/endpoints/${escape(e.name)}" data-link>${escape(e.name)}</a>`,
        state(e.state),
        `${e.ready_replicas} / ${e.replicas}`,
        `${e.on_demand_replicas} / ${e.interruptible_replicas}`,
        perHour(e.cost_per_hour),
      ],
      "No endpoints.",
    );
    $("fleet-instances").innerHTML = table(
      ["Instance", "Endpoint", "GPU", "State", "Interruptible", "$/h", "Uptime", "Total", "Auto-destroy", "Created"],
      list.instances,
      (/** @type {any} */ i) => [
        escape(i.instance_id),
        i.endpoint ? `<a href="/dashboard/endpoints/${escape(i.endpoint)}" data-link>${escape(i.endpoint)}</a>` : "",
        escape(`${i.gpu_info?.num_gpus ?? 1}× ${i.gpu_info?.gpu_name ?? "?"}`),
        state(i.status),
        i.interruptible ? `yes${i.bid_per_hour ? ` (bid ${perHour(i.bid_per_hour)})` : ""}` : "no",
        perHour(i.cost_per_hour),
        escape(i.uptime),
        money(i.total_cost),
        i.auto_destroy ? "yes" : "no",
        escape(time(i.created_at)),
      ],
      "No instances.",
    );
    await markets.refresh();
  };
  return { refresh: () => refresh() };
}
