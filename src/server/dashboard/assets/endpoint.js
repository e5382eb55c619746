// @ts-check
// One endpoint: its state, replicas and $/h now; over the window the reader picks, on one time
// axis, its load against its target and ready replicas, requests per minute by outcome, first-byte
// p50 and p99, and $/h (GET .../history); its usage by key over the window (each key that may
// call it, from its usage read on this endpoint); its events, newest first.

import { ApiError, get } from "./api.js";
import { series, timeChart } from "./charts.js";
import { count, escape, failure, figures, money, onWindowChosen, windowButtons, notice, perHour, state, table, time } from "./format.js";
import { keyOpens, keyUsage, totals } from "./key-usage.js";

const WINDOWS = { "1 h": { ms: 3_600_000, step: 60 }, "24 h": { ms: 86_400_000, step: 60 }, "7 d": { ms: 604_800_000, step: 420 } };
const OUTCOMES = [
  ["ok", "2xx", "#1a7f37", undefined],
  ["client_error", "4xx", "#9a6700", [2, 3]],
  ["server_error", "5xx", "#cf222e", [8, 3]],
  ["held", "held", "#8250df", [1, 3]],
  ["continued", "continued", "#0969da", [10, 3, 2, 3]],
  ["cut", "cut", "#57606a", [4, 4]],
];

/** @param {HTMLElement} main @param {string} name @param {import("./app.js").Shell} shell */
export function mountEndpoint(main, name, shell) {
  /** @type {keyof typeof WINDOWS} */
  let window = "1 h";
  main.innerHTML = `<p><a href="/dashboard" data-link>← Fleet</a></p><h1>Endpoint ${escape(name)}</h1><div id="ep-figures"></div>
    ${windowButtons(Object.keys(WINDOWS), window)}<div id="ep-empty"></div><div class="charts" id="ep-charts"></div>
    <h2>Usage by key</h2><div id="ep-keys"></div>
    <h2>Events</h2><div id="ep-events"></div>`;
  // A refresh that ends after the reader moved on writes into nothing.
  const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (main.querySelector(`#${id}`) ?? document.createElement("div"));
  const charts = $("ep-charts");
  const load = timeChart(charts, {
    title: "Load against replicas",
    y: "requests / replicas",
    lines: [
      { label: "load (in flight + held)", stroke: "#0969da" },
      { label: "held", stroke: "#8250df", dash: [1, 3] },
      { label: "target replicas", stroke: "#bf8700", dash: [8, 4] },
      { label: "ready replicas", stroke: "#1a7f37", dash: [2, 2] },
    ],
  });
  const requests = timeChart(charts, {
    title: "Requests per minute by outcome",
    y: "requests / min",
    lines: OUTCOMES.map(([, label, stroke, dash]) => ({ label: /** @type {string} */ (label), stroke: /** @type {string} */ (stroke), dash: /** @type {number[] | undefined} */ (dash) })),
  });
  const latency = timeChart(charts, {
    title: "Time to first byte",
    y: "ms",
    lines: [
      { label: "p50", stroke: "#0969da" },
      { label: "p99", stroke: "#cf222e", dash: [6, 4] },
    ],
  });
  const cost = timeChart(charts, { title: "Cost", y: "$/h", lines: [{ label: "$/h", stroke: "#bf8700" }] });
  let refresh = async () => {};
  onWindowChosen(main, (name) => {
    window = /** @type {keyof typeof WINDOWS} */ (name);
    void refresh();
  });

  refresh = async () => {
    const { ms, step } = WINDOWS[window];
    const path = `/api/gpu/endpoints/${encodeURIComponent(name)}`;
    const answers = await Promise.allSettled([get(path), get(`${path}/history?from=${new Date(Date.now() - ms).toISOString()}&step_s=${step}`), get(`${path}/events?limit=50`)]);
    const reasons = answers.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    shell.report(`endpoint ${name}`, reasons[0]);
    if (reasons.some((error) => error instanceof ApiError && error.status === 404)) {
      $("ep-figures").innerHTML = notice(`There is no endpoint named ${escape(name)}. <a href="/dashboard" data-link>See the fleet's endpoints.</a>`, "bad");
      return;
    }
    // Each part that failed is told in its place; the others still show.
    const [endpoint, history, events] = /** @type {any[]} */ (answers.map((r) => (r.status === "fulfilled" ? r.value : undefined)));
    const told = (/** @type {number} */ i, /** @type {string} */ id, /** @type {string} */ what) => {
      const answer = answers[i];
      if (answer?.status === "rejected") $(id).innerHTML = failure(what, answer.reason);
    };
    told(0, "ep-figures", "The endpoint");
    told(1, "ep-empty", "Its history");
    told(2, "ep-events", "Its events");
    if (endpoint) drawFigures(endpoint);
    if (history) drawHistory(history, endpoint?.url ?? `/endpoints/${name}/v1`);
    if (events) drawEvents(events);
    await usageByKey();
  };

  const usageByKey = async () => {
    const chosen = window;
    try {
      const { keys } = await get("/api/gpu/keys");
      // Usage is recorded by name: a name taken again after a revocation is read once.
      const names = [...new Set(/** @type {any[]} */ (keys).filter((k) => keyOpens(k, name)).map((k) => /** @type {string} */ (k.name)))];
      const used = await Promise.all(names.map(async (key) => ({ key, ...totals(await keyUsage(key, chosen, name)) })));
      shell.report("keys");
      if (window !== chosen) return;
      $("ep-keys").innerHTML = table(
        ["Key", "Requests", "Tokens", "Spend", "Machine cost"],
        used.filter((u) => u.requests > 0 || u.promptTokens + u.completionTokens > 0).sort((a, b) => b.spend - a.spend || b.promptTokens + b.completionTokens - (a.promptTokens + a.completionTokens) || a.key.localeCompare(b.key)),
        (u) => [escape(u.key), count(u.requests), count(u.promptTokens + u.completionTokens), money(u.spend), money(u.machineCost)],
        `No key called this endpoint in the last ${chosen}.`,
      );
    } catch (error) {
      shell.report("keys", error);
      $("ep-keys").innerHTML = failure("Its usage by key", error);
    }
  };

  /** @param {any} endpoint */
  const drawFigures = (endpoint) => {
    $("ep-figures").innerHTML = figures([
      ["State", state(endpoint.state)],
      ["Ready / target", `${endpoint.ready_replicas} / ${endpoint.replicas}`],
      ["On-demand / interruptible", `${endpoint.on_demand_replicas} / ${endpoint.interruptible_replicas}`],
      ["Now", perHour(endpoint.cost_per_hour)],
      ["Budget", perHour(endpoint.max_cost_per_hour)],
      // How a request chooses its replica: the one holding its prompt's prefix, or the least busy.
      ["Routing", escape(endpoint.routing === "least_outstanding" ? "least outstanding" : endpoint.routing)],
    ]);
  };

  /** @param {any} history @param {string} url the endpoint's model URL, for the empty state */
  const drawHistory = (history, url) => {
    const points = history.points;
    $("ep-empty").innerHTML =
      points.length === 0
        ? notice(
            `No samples in this window yet. The service keeps one sample a minute per endpoint; send requests to <code>${escape(location.origin)}${escape(url)}/chat/completions</code> and the charts fill in within a minute or two.`,
          )
        : "";
    const perMinute = 60 / history.step_s;
    const at = (/** @type {any} */ p) => p.at;
    /** @type {[number, number]} the window asked for, whatever points it holds */
    const span = [Date.parse(history.from) / 1000, Date.parse(history.to) / 1000];
    const draw = (/** @type {{update: Function}} */ chart, /** @type {Array<(p: any) => number | null>} */ values) => {
      const { xs, ys } = series(points, at, history.step_s, values);
      chart.update(xs, ys, span);
    };
    draw(load, [(p) => p.load, (p) => p.held, (p) => p.target_replicas, (p) => p.ready_replicas]);
    draw(requests, OUTCOMES.map(([key]) => (/** @type {any} */ p) => p.requests[/** @type {string} */ (key)] * perMinute));
    draw(latency, [(p) => p.first_byte_p50_ms ?? null, (p) => p.first_byte_p99_ms ?? null]);
    draw(cost, [(p) => p.cost_per_hour]);
  };

  /** @param {any} events */
  const drawEvents = (events) => {
    $("ep-events").innerHTML = table(
      ["When", "Event", "Replica", "Detail", "By"],
      events.events,
      (/** @type {any} */ e) => [escape(time(e.at)), escape(e.kind), escape(e.instance_id ?? ""), `<span class="wrap">${escape(e.detail)}</span>`, escape(e.actor)],
      "No events yet.",
    ).replaceAll('<td><span class="wrap">', '<td class="wrap"><span>');
  };
  return { refresh: () => refresh() };
}
