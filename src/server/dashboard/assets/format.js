// @ts-check
// Numbers, money and times as the page shows them: money with its unit, times in the browser's
// time zone, states as words (with a mark whose colour only repeats the word).

import { ApiError } from "./api.js";

/** @param {number | undefined} n */
export const money = (n) => `$${(n ?? 0).toFixed((n ?? 0) !== 0 && Math.abs(n ?? 0) < 0.1 ? 4 : 2)}`;
/** A count (the API writes 64-bit ones as strings) with its thousands marked. @param {number | string | undefined} n */
export const count = (n) => Number(n ?? 0).toLocaleString("en-US");
/** @param {number | undefined} n */
export const perHour = (n) => `${money(n)}/h`;
/** @param {string | undefined} iso */
export const time = (iso) => (iso ? new Date(iso).toLocaleString() : "");
/** @param {number} ms */
export const duration = (ms) => (ms < 1000 ? `${Math.round(ms)} ms` : ms < 120_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`);

const GOOD = new Set(["ready", "running", "running_llm", "following", "COMPLETED", "success"]);
const BAD = new Set(["failed", "unhealthy", "degraded", "exited", "FAILED", "waiting_for_elasticsearch", "error"]);

/** @param {string} text */
export function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A state as a word, with a mark coloured after it. @param {string} state */
export function state(state) {
  const kind = GOOD.has(state) ? "good" : BAD.has(state) ? "bad" : "warn";
  return `<span class="state ${kind}">${escape(state)}</span>`;
}

/**
 * A table: one row per item, an empty line when there is none.
 * @template T
 * @param {string[]} headings
 * @param {T[]} items
 * @param {(item: T) => string[]} cells HTML of each cell, already escaped
 * @param {string} empty
 */
export function table(headings, items, cells, empty) {
  if (items.length === 0) return `<p class="muted">${escape(empty)}</p>`;
  const head = headings.map((h) => `<th scope="col">${escape(h)}</th>`).join("");
  const rows = items.map((item) => `<tr>${cells(item).map((c) => `<td>${c}</td>`).join("")}</tr>`).join("");
  return `<div class="scroll"><table><thead><tr>${head}</tr></thead><tbody>${rows}</tbody></table></div>`;
}

/** @param {Array<[string, string]>} pairs label and value (escaped HTML) */
export function figures(pairs) {
  return `<dl class="figures">${pairs.map(([k, v]) => `<div><dt>${escape(k)}</dt><dd>${v}</dd></div>`).join("")}</dl>`;
}

/** @param {string} html @param {"warn" | "bad"} [kind] */
export const notice = (html, kind = "warn") => `<div class="notice ${kind}" role="status">${html}</div>`;

/**
 * A part of a page that could not be read, told in its place: the service's own words (a 503
 * says whether the database is away or too slow), and that the page tries again.
 * @param {string} what @param {unknown} error
 */
export function failure(what, error) {
  const said = error instanceof Error ? error.message : String(error);
  const detail = /[.!?]$/.test(said) ? said : `${said}.`;
  const status = error instanceof ApiError && error.status > 0 ? ` (${error.status})` : "";
  return notice(`${escape(what)} cannot be read now${status}: ${escape(detail)} The page tries again every 5 s.`, "bad");
}

/** The window buttons (1 h, 24 h, 7 d...): `chosen` pressed. @param {string[]} names @param {string} chosen */
export const windowButtons = (names, chosen) =>
  `<div class="windows" role="group" aria-label="Window">${names.map((w) => `<button type="button" data-window="${w}" aria-pressed="${w === chosen}">${w}</button>`).join("")}</div>`;

/** Calls `choose` with the window a click on its buttons picks, and marks it pressed. @param {HTMLElement} main @param {(name: string) => void} choose */
export function onWindowChosen(main, choose) {
  main.querySelector(".windows")?.addEventListener("click", (event) => {
    const button = /** @type {HTMLElement} */ (event.target).closest("button");
    if (!button) return;
    for (const b of main.querySelectorAll(".windows button")) b.setAttribute("aria-pressed", String(b === button));
    choose(/** @type {string} */ (button.dataset.window));
  });
}
