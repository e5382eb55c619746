// @ts-check
// The fleet: what it costs now, over the last 24 hours and 7 days ($/h over time with the running
// total, from the instance records), its endpoints, and its machines: the live ones first, the
// ended ones (destroyed, failed) behind a fold. Each part is read on its own and drawn as soon as
// it answers: one slow or refused call is told in its place, and the rest of the page still shows.

import { get } from "./api.js";
import { series, timeChart } from "./charts.js";
import { mountFleetMarkets } from "./fleet-markets.js";
import { escape, failure, figures, onWindowChosen, windowButtons, money, notice, perHour, state, table, time } from "./format.js";

const HOUR = 3_600_000;
const WINDOWS = { "24 h": { ms: 24 * HOUR, step: 60 }, "7 d": { ms: 7 * 24 * HOUR, step: 420 } };
/** Stored states of a machine that is, or may again be, billing: the live list asks for each. */
const LIVE = ["creating", "loading", "running", "running_llm", "exited"];
/** Ended machines: behind the fold, the newest of each state. */
const ENDED = ["destroyed", "failed"];
const ENDED_SHOWN = 50;

/** @param {HTMLElement} main @param {import("./app.js").Shell} shell */
export function mountFleet(main, shell) {
  /** @type {keyof typeof WINDOWS} */
  let window = "24 h";
  main.innerHTML = `<h1>Fleet</h1><div id="fleet-figures"></div>
    <h2>Spend</h2>${windowButtons(Object.keys(WINDOWS), window)}<div id="fleet-spend"></div><div class="charts" id="fleet-charts"></div>
    <h2>Endpoints</h2><div id="fleet-endpoints"></div>
    <h2>Markets</h2><div id="fleet-markets"></div>
    <h2>Machines</h2><div id="fleet-instances"><p class="muted">Loading…</p></div>
    <details id="fleet-ended"><summary>Ended machines</summary><div id="fleet-ended-list"></div></details>`;
  // A refresh that ends after the reader moved on writes into nothing.
  const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (main.querySelector(`#${id}`) ?? document.createElement("div"));
  const chart = timeChart($("fleet-charts"), {
    title: "Fleet $/h and its running total",
    y: "$/h",
    y2: "$ since the window's start",
    lines: [
      { label: "$/h", stroke: "#0969da" },
      { label: "total $", stroke: "#bf8700", dash: [6, 4], scale: "y2", linear: true },
    ],
  });
  const markets = mountFleetMarkets($("fleet-markets"));
  let refresh = async () => {};
  onWindowChosen(main, (name) => {
    window = /** @type {keyof typeof WINDOWS} */ (name);
    void refresh();
  });
  const since = (/** @type {number} */ ms) => new Date(Date.now() - ms).toISOString();
  /** What the empty state needs from two parts: whether any machine and any endpoint exist. */
  const known = { live: /** @type {number | undefined} */ (undefined), ended: /** @type {number | undefined} */ (undefined), endpoints: /** @type {number | undefined} */ (undefined) };

  /**
   * Reads one part and draws it, or tells in its place why it cannot be read now.
   * @param {string} part as the access line names it @param {string} id @param {() => Promise<void>} draw
   */
  const part = async (part, id, draw) => {
    try {
      await draw();
      shell.report(part);
    } catch (error) {
      shell.report(part, error);
      $(id).innerHTML = failure(`The ${part}`, error);
    }
  };

  const figuresPart = () =>
    part("fleet's spend", "fleet-figures", async () => {
      // The totals need only their last point: one step as long as their window.
      const [day, week] = await Promise.all([
        get(`/api/gpu/spend?from=${since(WINDOWS["24 h"].ms)}&step_s=86400`),
        get(`/api/gpu/spend?from=${since(WINDOWS["7 d"].ms)}&step_s=604800`),
      ]);
      $("fleet-figures").innerHTML = figures([
        ["Now", perHour(day.points.at(-1)?.cost_per_hour)],
        ["Last 24 hours", money(day.points.at(-1)?.total_cost)],
        ["Last 7 days", money(week.points.at(-1)?.total_cost)],
      ]);
      showEmptyState();
    });

  const spendPart = () =>
    part("fleet's spend over time", "fleet-spend", async () => {
      const { ms, step } = WINDOWS[window];
      const spend = await get(`/api/gpu/spend?from=${since(ms)}&step_s=${step}`);
      const { xs, ys } = series(spend.points, (/** @type {any} */ p) => p.at, spend.step_s, [(/** @type {any} */ p) => p.cost_per_hour, (/** @type {any} */ p) => p.total_cost]);
      chart.update(xs, ys, [Date.parse(spend.from) / 1000, Date.parse(spend.to) / 1000]);
      $("fleet-spend").innerHTML = "";
    });

  const endpointsPart = () =>
    part("fleet's endpoints", "fleet-endpoints", async () => {
      const eps = await get("/api/gpu/endpoints");
      known.endpoints = eps.endpoints.length;
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
      showEmptyState();
    });

  const livePart = () =>
    part("fleet's machines", "fleet-instances", async () => {
      const lists = await Promise.all(LIVE.map((status) => get(`/api/gpu/instances?status_filter=${status}&limit=100`)));
      const live = newestFirst(lists.flatMap((l) => l.instances));
      const count = lists.reduce((sum, l) => sum + l.count, 0);
      known.live = count;
      const more = count > live.length ? `<p class="muted">The newest ${live.length} of ${count} live machines.</p>` : "";
      $("fleet-instances").innerHTML = `<p class="muted">${count} live (creating, loading, running or stopped).</p>` + instanceTable(live, "No live machines.") + more;
      showEmptyState();
    });

  const endedPart = () =>
    part("fleet's ended machines", "fleet-ended-list", async () => {
      const lists = await Promise.all(ENDED.map((status) => get(`/api/gpu/instances?status_filter=${status}&limit=${ENDED_SHOWN}`)));
      const ended = newestFirst(lists.flatMap((l) => l.instances)).slice(0, ENDED_SHOWN);
      const count = lists.reduce((sum, l) => sum + l.count, 0);
      known.ended = count;
      showEmptyState();
      $("fleet-ended").querySelector("summary")?.replaceChildren(`Ended machines (${count}: destroyed or failed)`);
      $("fleet-ended-list").innerHTML =
        instanceTable(ended, "No machine has ended yet.") + (count > ended.length ? `<p class="muted">The newest ${ended.length} of ${count}.</p>` : "");
    });

  /** A new install: no machine and no endpoint. Says what to do first. */
  function showEmptyState() {
    const box = $("fleet-figures");
    box.querySelector(".first-steps")?.remove();
    if (known.live !== 0 || known.ended !== 0 || known.endpoints !== 0 || !box.querySelector("dl")) return;
    box.insertAdjacentHTML(
      "beforeend",
      `<div class="first-steps">${notice(
        `No machines yet. Start with an endpoint: <code>curl -X POST ${escape(location.origin)}/api/gpu/endpoints -H 'content-type: application/json' -d '{"name":"chat","template_name":"budget","replicas":1,"max_cost_per_hour":1}'</code>, then send requests to <code>/endpoints/chat/v1/chat/completions</code>. Charts fill in as machines bill.`,
      )}</div>`,
    );
  }

  refresh = async () => {
    await Promise.all([figuresPart(), spendPart(), endpointsPart(), markets.refresh(), livePart(), endedPart()]);
  };
  return { refresh: () => refresh() };
}

/**
 * One row per machine, newest first. The lists are read one status at a time: a machine whose
 * status changed between two reads is in both, and the later list's row (its later status) is kept.
 * @param {any[]} instances
 */
const newestFirst = (instances) => [...new Map(instances.map((/** @type {any} */ i) => [i.instance_id, i])).values()].sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at) || String(b.instance_id).localeCompare(String(a.instance_id)));

/** @param {any[]} instances @param {string} empty */
function instanceTable(instances, empty) {
  return table(
    ["Instance", "Endpoint", "Market", "GPU", "State", "Interruptible", "$/h", "Uptime", "Total", "Auto-destroy", "Created"],
    instances,
    (/** @type {any} */ i) => [
      escape(i.instance_id),
      i.endpoint ? `<a href="/dashboard/endpoints/${escape(i.endpoint)}" data-link>${escape(i.endpoint)}</a>` : "",
      escape(i.market ?? ""),
      escape(`${i.gpu_info?.num_gpus ?? 1}× ${i.gpu_info?.gpu_name ?? "?"}`),
      state(i.status),
      i.interruptible ? `yes${i.bid_per_hour ? ` (bid ${perHour(i.bid_per_hour)})` : ""}` : "no",
      perHour(i.cost_per_hour),
      escape(i.uptime),
      money(i.total_cost),
      i.auto_destroy ? "yes" : "no",
      escape(time(i.created_at)),
    ],
    empty,
  );
}
