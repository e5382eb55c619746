// @ts-check
// Keys' usage as the pages read it (GET /api/gpu/keys/{name}/usage): the windows it answers, a
// point a minute (an hour over 7 d), and what a window's points add up to. The API writes token
// counts as strings (64-bit integers) and leaves out the steps with no usage.

import { get } from "./api.js";

/** The usage read's windows, as the pages name them. */
export const USAGE_WINDOWS = { "1 h": { window: "1h", ms: 3_600_000, step: 60 }, "24 h": { window: "24h", ms: 86_400_000, step: 60 }, "7 d": { window: "7d", ms: 604_800_000, step: 3600 } };

/** @typedef {{ requests: number, promptTokens: number, completionTokens: number, spend: number, machineCost: number, refused: Record<string, number> }} UsageTotals */

/**
 * One key's usage points over a window, on one endpoint or all of them.
 * @param {string} key @param {keyof typeof USAGE_WINDOWS} window @param {string} [endpoint]
 * @returns {Promise<any[]>}
 */
export async function keyUsage(key, window, endpoint) {
  const query = `window=${USAGE_WINDOWS[window].window}${endpoint ? `&endpoint=${encodeURIComponent(endpoint)}` : ""}`;
  const answer = await get(`/api/gpu/keys/${encodeURIComponent(key)}/usage?${query}`);
  return answer.points ?? [];
}

/** @param {any[]} points @returns {UsageTotals} */
export function totals(points) {
  /** @type {UsageTotals} */
  const sum = { requests: 0, promptTokens: 0, completionTokens: 0, spend: 0, machineCost: 0, refused: {} };
  for (const p of points) {
    sum.requests += Number(p.requests ?? 0);
    sum.promptTokens += Number(p.prompt_tokens ?? 0);
    sum.completionTokens += Number(p.completion_tokens ?? 0);
    sum.spend += p.spend ?? 0;
    sum.machineCost += p.machine_cost ?? 0;
    for (const [reason, n] of Object.entries(p.refused ?? {})) sum.refused[reason] = (sum.refused[reason] ?? 0) + Number(n);
  }
  return sum;
}

/**
 * The window's steps from its start to now, each with its point or zeros: a step the read leaves
 * out had no usage, which a chart draws as 0, not as a gap. A point's `at` is its step's start;
 * the charts draw a point at the end of the step it stands for, so the axis ends with the
 * current step.
 * @param {any[]} points @param {keyof typeof USAGE_WINDOWS} window @param {number} now ms
 * @param {Array<(p: any) => number>} values
 * @returns {{ xs: number[], ys: number[][], span: [number, number] }}
 */
export function usageSeries(points, window, now, values) {
  const { ms, step } = USAGE_WINDOWS[window];
  const byStep = new Map(points.map((p) => [Math.floor(Date.parse(p.at) / 1000 / step) * step, p]));
  const first = Math.floor((now - ms) / 1000 / step) * step;
  const last = Math.floor(now / 1000 / step) * step;
  /** @type {number[]} */
  const xs = [];
  /** @type {number[][]} */
  const ys = values.map(() => []);
  for (let start = first; start <= last; start += step) {
    const p = byStep.get(start);
    xs.push(start + step);
    values.forEach((v, i) => ys[i].push(p ? v(p) : 0));
  }
  return { xs, ys, span: [(now - ms) / 1000, last + step] };
}

/** May this key call this endpoint (an empty list: every endpoint)? @param {any} key @param {string} endpoint */
export const keyOpens = (key, endpoint) => (key.endpoints ?? []).length === 0 || key.endpoints.includes(endpoint);
