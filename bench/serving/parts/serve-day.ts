// npm run bench:serve, the day it replays (SPEC.md section 2, "Interruptible replicas with
// on-demand fallback"): the load profile over 24 simulated hours, the Poisson arrivals drawn from
// it with a seeded generator, and the compression of simulated time into wall time.

export const DAY_S = 86_400;
const H = 3_600;

/** Twice the peak for 20 simulated minutes at 10:00 and 15:00. */
export const BURSTS: ReadonlyArray<{ fromS: number; toS: number }> = [
  { fromS: 10 * H, toS: 10 * H + 20 * 60 },
  { fromS: 15 * H, toS: 15 * H + 20 * 60 },
];
export const BURST_SHARE = 2;
const NIGHT_SHARE = 0.05;
const EVENING_SHARE = 0.5;

/**
 * The arrival rate at simulated second `s` of the day as a share of the peak. Piecewise linear:
 * 00:00 50% falling to 5% at 01:00; 5% until 06:00; rising to 100% at 11:00; 100% until 17:00;
 * falling to 50% at 18:00; 50% until midnight. A burst replaces the rate with twice the peak.
 */
export function rateShare(s: number): number {
  if (BURSTS.some((b) => s >= b.fromS && s < b.toS)) return BURST_SHARE;
  const h = s / H;
  const between = (from: number, to: number, a: number, b: number) => a + ((b - a) * (h - from)) / (to - from);
  if (h < 1) return between(0, 1, EVENING_SHARE, NIGHT_SHARE);
  if (h < 6) return NIGHT_SHARE;
  if (h < 11) return between(6, 11, NIGHT_SHARE, 1);
  if (h < 17) return 1;
  if (h < 18) return between(17, 18, 1, EVENING_SHARE);
  return EVENING_SHARE;
}

export const PROFILE_TEXT = [
  "00:00-01:00 50% of the peak falling to 5%; 01:00-06:00 5% (never zero); 06:00-11:00 rising to 100%;",
  "11:00-17:00 the peak; 17:00-18:00 falling to 50%; 18:00-24:00 50% (the evening);",
  "10:00-10:20 and 15:00-15:20 bursts at twice the peak (replacing the rate of the moment)",
].join("\n");

/**
 * Arrival moments (simulated seconds, ascending) of a Poisson process whose rate is
 * `peakPerS` x rateShare(s): a homogeneous process at the highest rate, each arrival kept with
 * probability rate(s) / highest rate (thinning, Lewis and Shedler).
 */
export function poissonArrivals(peakPerS: number, random: () => number): number[] {
  const top = peakPerS * BURST_SHARE;
  const arrivals: number[] = [];
  for (let s = 0; ; ) {
    s += -Math.log(1 - random()) / top;
    if (s >= DAY_S) return arrivals;
    if (random() < (peakPerS * rateShare(s)) / top) arrivals.push(s);
  }
}

/** The expected number of arrivals over the day (the integral of the rate), for the printout. */
export function expectedArrivals(peakPerS: number): number {
  let sum = 0;
  for (let s = 0; s < DAY_S; s += 10) sum += peakPerS * rateShare(s + 5) * 10;
  return sum;
}

/** The q-quantile of ascending values (nearest rank); NaN when empty. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** `hh:mm` of a simulated second. */
export function clock(s: number): string {
  const m = Math.floor(s / 60);
  return `${String(Math.floor(m / 60)).padStart(2, "0")}:${String(m % 60).padStart(2, "0")}`;
}
