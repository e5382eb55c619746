// @ts-check
// The dashboard's shell: the route (/dashboard, /dashboard/endpoints/{name}, /dashboard/keys,
// /dashboard/indexing) picks a view, which refreshes its data every 5 s without reloading the
// page. With auth on, a call answered 401 asks for a token (kept for this browser session); what
// the token may read is said at the top, part by part, from the answers of the views.

import { ApiError, setToken, token } from "./api.js";
import { escape } from "./format.js";
import { mountEndpoint } from "./endpoint.js";
import { mountFleet } from "./fleet.js";
import { mountIndexing } from "./indexing.js";
import { mountKeys } from "./keys.js";

/** @typedef {{ refresh(): Promise<void> }} View */
/** @typedef {{ report(part: string, error?: unknown): void, navigate(path: string): void }} Shell */

const REFRESH_MS = 5_000;
const main = /** @type {HTMLElement} */ (document.getElementById("main"));
const form = /** @type {HTMLFormElement} */ (document.getElementById("token-form"));
const access = /** @type {HTMLElement} */ (document.getElementById("access"));
/** What each part of the page could read at its last refresh: "" when it could, else why not. */
const parts = new Map();
/** @type {View | undefined} */
let view;
let timer = 0;

/** @type {Shell} */
const shell = {
  report(part, error) {
    if (error instanceof ApiError && error.status === 401) return askForToken(token() ? "The service refused this token (401). Check it and enter it again." : "This service asks for a token.");
    parts.set(part, error instanceof ApiError && error.status === 403 ? error.message : "");
    showAccess();
  },
  navigate(path) {
    history.pushState(null, "", path);
    route();
  },
};

/** @param {string} why */
function askForToken(why) {
  clearTimeout(timer);
  view = undefined;
  main.innerHTML = "";
  /** @type {HTMLElement} */ (document.getElementById("token-why")).textContent = why;
  form.hidden = false;
  /** @type {HTMLInputElement} */ (form.elements.namedItem("token")).focus();
}

function showAccess() {
  const refused = [...parts].filter(([, why]) => why !== "");
  const who = token() ? "With this token" : "Without a token (auth is off)";
  access.innerHTML =
    refused.length === 0
      ? `${who}: everything on this page is readable.`
      : `${who}: ${refused.map(([part, why]) => `${escape(part)} not readable (${escape(why)})`).join("; ")}.`;
}

function route() {
  clearTimeout(timer);
  form.hidden = true;
  parts.clear();
  const path = location.pathname.replace(/\/+$/, "");
  const endpoint = /^\/dashboard\/endpoints\/([a-z][a-z0-9-]{0,39})$/.exec(path);
  for (const link of document.querySelectorAll("nav a")) {
    const here = link.getAttribute("href") === path || (path === "/dashboard" && link.getAttribute("href") === "/dashboard");
    if (here) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  main.innerHTML = `<p class="muted">Loading…</p>`;
  if (endpoint) view = mountEndpoint(main, endpoint[1], shell);
  else if (path === "/dashboard/keys") view = mountKeys(main, shell);
  else if (path === "/dashboard/indexing") view = mountIndexing(main, shell);
  else view = mountFleet(main, shell);
  void tick();
}

async function tick() {
  const current = view;
  if (current === undefined) return;
  await current.refresh();
  if (view === current && form.hidden) timer = window.setTimeout(tick, REFRESH_MS);
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  setToken(/** @type {HTMLInputElement} */ (form.elements.namedItem("token")).value.trim());
  form.reset();
  route();
});

// Links inside the page change the view without loading a new page.
document.addEventListener("click", (event) => {
  const link = /** @type {HTMLElement} */ (event.target).closest?.("a[data-link]");
  if (!link || /** @type {MouseEvent} */ (event).ctrlKey || /** @type {MouseEvent} */ (event).metaKey) return;
  event.preventDefault();
  shell.navigate(/** @type {string} */ (link.getAttribute("href")));
});
window.addEventListener("popstate", route);
route();
