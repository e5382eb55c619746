// @ts-check
// The keys callers use (GET /api/gpu/keys): each one's state, its period's spend against its
// budget, tokens and requests, its refusals by reason over the window the reader picks, and how
// near each of its limits is now (answers in flight; requests and tokens of the last minute's
// usage point). The selected key's tokens over the window are charted.

import { get } from "./api.js";
import { timeChart } from "./charts.js";
import { USAGE_WINDOWS, keyUsage, totals, usageSeries } from "./key-usage.js";
import { count, escape, failure, money, onWindowChosen, table, windowButtons } from "./format.js";

/** A share of a limit from which its bar is drawn as a warning, and at or past 1 as spent. */
const NEAR = 0.8;

/** @param {HTMLElement} main @param {import("./app.js").Shell} shell */
export function mountKeys(main, shell) {
  /** @type {keyof typeof USAGE_WINDOWS} */
  let window = "24 h";
  /** @type {string | undefined} the key charted; the first key until the reader picks one */
  let selected;
  main.innerHTML = `<h1>Keys</h1>
    <p class="muted">Spend, tokens and requests are the key's budget period's; refusals are the window's. Pick a key to chart its tokens.</p>
    ${windowButtons(Object.keys(USAGE_WINDOWS), window)}<div id="keys-list"><p class="muted">Loading…</p></div>
    <h2>Tokens over the window</h2><div id="keys-chart-note"></div><div class="charts" id="keys-charts"></div>`;
  // A refresh that ends after the reader moved on writes into nothing.
  const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (main.querySelector(`#${id}`) ?? document.createElement("div"));
  const chart = timeChart($("keys-charts"), {
    title: "Tokens of the selected key",
    y: "tokens / step",
    lines: [
      { label: "prompt", stroke: "#0969da" },
      { label: "completion", stroke: "#bf8700", dash: [6, 4] },
    ],
  });
  let refresh = async () => {};
  onWindowChosen(main, (name) => {
    window = /** @type {keyof typeof USAGE_WINDOWS} */ (name);
    void refresh();
  });
  /** @type {{ keys: any[], usage: Map<string, any[]>, minutes: Map<string, any[]> } | undefined} the last read, drawn again when the reader picks a key */
  let shown;
  $("keys-list").addEventListener("click", (event) => {
    const button = /** @type {HTMLElement} */ (event.target).closest("button[data-key]");
    if (!button || !shown) return;
    selected = /** @type {string} */ (button.getAttribute("data-key"));
    draw(shown);
  });

  refresh = async () => {
    const chosen = window;
    try {
      const { keys } = await get("/api/gpu/keys");
      // Usage is recorded by name: a name taken again after a revocation is read once.
      const names = [...new Set(/** @type {any[]} */ (keys).map((k) => /** @type {string} */ (k.name)))];
      const usage = await usageOf(names, chosen);
      // Requests and tokens a minute need minute points: over 7 d (an hour a point), the last hour's.
      const limited = names.filter((n) => keys.some((/** @type {any} */ k) => k.name === n && (k.rpm_limit || k.tpm_limit)));
      const minutes = chosen === "7 d" ? await usageOf(limited, "1 h") : usage;
      shell.report("keys");
      if (window !== chosen) return;
      if (selected === undefined || !names.includes(selected)) selected = names[0];
      shown = { keys, usage, minutes };
      draw(shown);
    } catch (error) {
      shell.report("keys", error);
      $("keys-list").innerHTML = failure("The keys and their usage", error);
    }
  };

  /** @param {NonNullable<typeof shown>} read */
  const draw = ({ keys, usage, minutes }) => {
    drawKeys(keys, usage, minutes);
    drawChart(selected ? (usage.get(selected) ?? []) : []);
  };

  /** @param {any[]} keys @param {Map<string, any[]>} usage @param {Map<string, any[]>} minutes */
  const drawKeys = (keys, usage, minutes) => {
    const now = Date.now();
    $("keys-list").innerHTML = table(
      // The columns a reader acts on first, so that a phone shows them before its table scrolls.
      ["Key", "State", "Spend / budget", "Limits now", "Tokens", "Requests", `Refused (${window})`, "Endpoints", "Prefix"],
      keys,
      (/** @type {any} */ k) => {
        const period = k.period ?? {};
        const refused = Object.entries(totals(usage.get(k.name) ?? []).refused).sort(([a], [b]) => a.localeCompare(b));
        return [
          `<button type="button" class="link" data-key="${escape(k.name)}" aria-pressed="${k.name === selected}">${escape(k.name)}</button>`,
          keyState(k, now),
          budget(period.spend ?? 0, k.max_budget, k.budget_duration),
          limits(k, lastMinute(minutes.get(k.name) ?? [], now)),
          `${count(Number(period.prompt_tokens ?? 0) + Number(period.completion_tokens ?? 0))}<br><span class="muted">${count(period.prompt_tokens)} in, ${count(period.completion_tokens)} out</span>`,
          count(period.requests),
          refused.length === 0 ? `<span class="muted">none</span>` : refused.map(([reason, n]) => `${escape(reason)}: ${count(n)}`).join("<br>"),
          (k.endpoints ?? []).length === 0 ? `<span class="muted">all</span>` : k.endpoints.map((/** @type {string} */ e) => `<a href="/dashboard/endpoints/${escape(e)}" data-link>${escape(e)}</a>`).join(", "),
          `<code>${escape(k.key_prefix)}</code>`,
        ];
      },
      "No keys yet. Make one with POST /api/gpu/keys (docs/keys.md).",
    );
  };

  /** @param {any[]} points */
  const drawChart = (points) => {
    const title = $("keys-charts").querySelector("h3");
    if (title) title.textContent = selected ? `Tokens of ${selected}` : "Tokens";
    const { xs, ys, span } = usageSeries(points, window, Date.now(), [(p) => Number(p.prompt_tokens ?? 0), (p) => Number(p.completion_tokens ?? 0)]);
    $("keys-chart-note").innerHTML = points.length === 0 ? `<p class="muted">${selected ? "No usage in this window." : "No key to chart."}</p>` : "";
    chart.update(xs, ys, span);
  };
  return { refresh: () => refresh() };
}

/** Each key's usage points over the window, by name. @param {string[]} names @param {keyof typeof USAGE_WINDOWS} window */
async function usageOf(names, window) {
  return new Map(await Promise.all(names.map(async (name) => /** @type {const} */ ([name, await keyUsage(name, window)]))));
}

/** live, revoked or expired. @param {any} key @param {number} now */
function keyState(key, now) {
  if (key.revoked_at) return `<span class="state bad">revoked</span>`;
  if (key.expires_at && Date.parse(key.expires_at) <= now) return `<span class="state warn">expired</span>`;
  return `<span class="state good">live</span>`;
}

/** A share of a limit as a bar and its words. @param {number} used @param {number} limit @param {string} words */
function meter(used, limit, words) {
  const share = limit > 0 ? used / limit : 0;
  const kind = share >= 1 ? "bad" : share >= NEAR ? "warn" : "good";
  // The bar only repeats the words beside it.
  return `<span class="meter ${kind}"><span class="bar" aria-hidden="true"><span style="width:${Math.min(100, share * 100).toFixed(1)}%"></span></span> ${words}</span>`;
}

/** @param {number} spend @param {number | undefined} max @param {string | undefined} duration */
function budget(spend, max, duration) {
  if (!max) return `${money(spend)} <span class="muted">no budget</span>`;
  const percent = Math.round((spend / max) * 100);
  return meter(spend, max, `${money(spend)} of ${money(max)}${duration ? ` / ${escape(duration)}` : ""} (${percent}%)`);
}

/** The usage point of the current minute, or else the minute before: what the rate limits see. @param {any[]} points @param {number} now */
function lastMinute(points, now) {
  const minute = Math.floor(now / 60_000) * 60_000;
  return points.find((p) => Date.parse(p.at) >= minute) ?? points.find((p) => Date.parse(p.at) >= minute - 60_000);
}

/** How near each limit the key has is, now. @param {any} key @param {any} minute its last minute's usage point */
function limits(key, minute) {
  const tokens = Number(minute?.prompt_tokens ?? 0) + Number(minute?.completion_tokens ?? 0);
  const parts = [
    key.max_parallel_requests ? meter(key.in_flight ?? 0, key.max_parallel_requests, `${count(key.in_flight)} / ${count(key.max_parallel_requests)} in flight`) : "",
    key.rpm_limit ? meter(Number(minute?.requests ?? 0), key.rpm_limit, `${count(minute?.requests)} / ${count(key.rpm_limit)} rpm`) : "",
    key.tpm_limit ? meter(tokens, key.tpm_limit, `${count(tokens)} / ${count(key.tpm_limit)} tpm`) : "",
  ].filter((p) => p !== "");
  return parts.length === 0 ? `<span class="muted">no limits</span>` : parts.join("<br>");
}
