// @ts-check
// The fleet's markets (GET /api/gpu/markets): each configured market's state (ok, failing with
// its last error, rate limited until when, blocked and why; a market no longer configured that
// live instances are still rented on: unconfigured), its live instances, which are the
// instances rented there, and what they cost per hour. A part of the fleet page of its own.

import { get } from "./api.js";
import { escape, notice, perHour, table, time } from "./format.js";

/** Each state's word and the colour of its mark (as format.js's state() marks them). */
const STATES = { ok: ["ok", "good"], failing: ["failing", "bad"], rate_limited: ["rate limited", "warn"], blocked: ["blocked", "bad"], unconfigured: ["not configured", "warn"] };

/** The state in words, with what the market said and since or until when. @param {any} m */
function stateOf(m) {
  const [word, kind] = STATES[/** @type {keyof typeof STATES} */ (m.state)] ?? [m.state, "warn"];
  const mark = `<span class="state ${kind}">${escape(word)}</span>`;
  const since = m.since ? ` since ${escape(time(m.since))}` : m.until ? ` until ${escape(time(m.until))}` : "";
  return `${mark}${since}${m.error ? `<br><span class="muted">${escape(m.error)}</span>` : ""}`;
}

/** @param {HTMLElement} container */
export function mountFleetMarkets(container) {
  return {
    async refresh() {
      let markets;
      try {
        ({ markets } = await get("/api/gpu/markets"));
      } catch (error) {
        container.innerHTML = notice(`The markets cannot be read now: ${escape(String(/** @type {Error} */ (error).message ?? error))}`, "bad");
        return;
      }
      container.innerHTML = table(
        ["Market", "State", "Live instances", "$/h"],
        markets,
        (/** @type {any} */ m) => [
          escape(m.name),
          stateOf(m),
          m.instances.length === 0 ? "none" : m.instances.map((/** @type {any} */ i) => `${escape(i.instance_id)} (${escape(i.status)}, ${perHour(i.cost_per_hour)})`).join("<br>"),
          perHour(m.dph_total),
        ],
        "No market configured.",
      );
    },
  };
}
