// @ts-check
// Time-series charts on uPlot (served from the service, loaded before the page's modules as the
// global `uPlot`): one time axis in the browser's time zone spanning the window asked for (not
// only the points there are), a legend that names each line (dashes tell lines apart besides
// their colour), the width of the page. A point stands for the step that ends at it: lines are
// drawn as steps (a slope between two samples would invent the values between them), and the
// points themselves are drawn while they are few. Each chart element keeps its uPlot as `plot`,
// so that a test can read the points it shows.

import { escape } from "./format.js";

/** @typedef {{ label: string, stroke: string, dash?: number[], scale?: "y" | "y2", linear?: boolean }} Line linear: a running total, which grows in between */

const HEIGHT = 220;
/** Points are drawn while each has at least this many pixels of the plot's width. */
const POINT_SPACE_PX = 8;

/**
 * @param {HTMLElement} parent
 * @param {{ title: string, lines: Line[], y: string, y2?: string }} spec
 */
export function timeChart(parent, spec) {
  const box = document.createElement("section");
  box.className = "chart";
  box.dataset.title = spec.title;
  box.innerHTML = `<h3>${escape(spec.title)}</h3>`;
  parent.append(box);
  const width = () => Math.max(240, box.clientWidth);
  // @ts-ignore: the global of uPlot's IIFE build
  const UPlot = /** @type {any} */ (window).uPlot;
  const axis = { stroke: "currentColor", grid: { stroke: "rgba(128,128,128,.2)" }, ticks: { stroke: "rgba(128,128,128,.3)" } };
  /** @type {[number, number] | undefined} the window's start and end, seconds */
  let span;
  const steps = UPlot.paths.stepped({ align: -1 });
  const sparse = (/** @type {any} */ u, /** @type {number} */ seriesIdx) =>
    /** @type {Array<number | null>} */ (u.data[seriesIdx]).filter((v) => v !== null).length * POINT_SPACE_PX <= u.bbox.width / devicePixelRatio;
  const plot = new UPlot(
    {
      width: width(),
      height: HEIGHT,
      scales: {
        x: { time: true, range: (/** @type {any} */ _u, /** @type {number} */ min, /** @type {number} */ max) => span ?? [min, max] },
        y: { range: (/** @type {any} */ _u, /** @type {number} */ min, /** @type {number} */ max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] },
      },
      series: [
        {},
        ...spec.lines.map((l) => ({
          label: l.label,
          stroke: l.stroke,
          dash: l.dash,
          width: 2,
          scale: l.scale ?? "y",
          ...(l.linear ? {} : { paths: steps }),
          points: { show: sparse, size: 6, fill: l.stroke },
        })),
      ],
      axes: [
        { ...axis },
        { ...axis, scale: "y", label: spec.y, size: 60 },
        ...(spec.y2 ? [{ ...axis, scale: "y2", side: 1, label: spec.y2, size: 60, grid: { show: false } }] : []),
      ],
    },
    [[], ...spec.lines.map(() => [])],
    box,
  );
  Object.defineProperty(box, "plot", { value: plot });
  new ResizeObserver(() => plot.setSize({ width: width(), height: HEIGHT })).observe(box);
  return {
    /**
     * @param {number[]} xs seconds @param {Array<Array<number | null>>} ys one array per line
     * @param {[number, number]} [window] the axis's start and end, seconds: the window asked for
     */
    update(xs, ys, window) {
      span = window;
      plot.setData([xs, ...ys]);
    },
  };
}

/**
 * Times (RFC 3339) as chart seconds, with a null point wherever a gap longer than a step and a
 * half shows that no sample exists: a line is not drawn across time it knows nothing of.
 * @template T
 * @param {T[]} points
 * @param {(p: T) => string} at
 * @param {number} stepS
 * @param {Array<(p: T) => number | null>} values
 * @returns {{ xs: number[], ys: Array<Array<number | null>> }}
 */
export function series(points, at, stepS, values) {
  /** @type {number[]} */
  const xs = [];
  /** @type {Array<Array<number | null>>} */
  const ys = values.map(() => []);
  let last;
  for (const p of points) {
    const x = Date.parse(at(p)) / 1000;
    if (last !== undefined && x - last > stepS * 1.5) {
      xs.push(last + stepS);
      ys.forEach((y) => y.push(null));
    }
    xs.push(x);
    values.forEach((v, i) => ys[i].push(v(p)));
    last = x;
  }
  return { xs, ys };
}
