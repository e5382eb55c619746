// npm run bench:serve, its settings: the compression of the simulated day into wall time, the
// simulated marketplace's clocks, the controller's clocks, the three endpoints' settings, and the
// peak the fixed policy is sized for. Every clock is chosen in simulated time and divided by the
// compression, with a floor where the machine (two cores, one Node process, PostgreSQL) cannot go
// faster; the printout says what each became in both times.
import { DAY_S } from "./serve-day.js";
import { mulberry32 } from "../../shared/random.js";

/** The pace of a streamed answer: 12 tokens over a simulated minute (sizes the peak's rate too). */
export const TOKENS = 12;
export const STREAM_SIM_S = 60;
/**
 * The tokens each answer asks for (BENCH_ANSWER_TOKENS), at that pace: 10 by default (50 simulated
 * s), the day every run of this bench has measured. The simulated model servers stopped at their
 * 10-word sentence whatever was asked before they learned to continue answers (they write every
 * token asked now), so asking 12 would be another, longer day.
 */
export const DAY_ANSWER_TOKENS = 10;
export const ANSWER_TOKENS = Number(process.env.BENCH_ANSWER_TOKENS ?? DAY_ANSWER_TOKENS);
/**
 * Streams in flight per endpoint at the peak (Little's law: rate x stream length); twice that in a
 * burst. Small, with a small target per replica, because the wall rate of requests grows with the
 * compression and the service, its model servers and these callers share one process.
 */
export const PEAK_IN_FLIGHT = 8;
export const TARGET_IN_FLIGHT = 2;
/** The cold start: rent (creating) 30 s, boot and weights (loading) 90 to 210 s, model server 60 s: 3 to 5 simulated minutes. */
const CREATING_SIM_S = 30;
const LOADING_SIM_S = { min: 90, max: 210 };
const MODEL_START_SIM_S = 60;
/** Random preemptions per interruptible replica-hour, in simulated hours. */
export const PREEMPT_PER_SIM_HOUR = 0.2;
/** Interruptible bids at the market's min_bid x (1 + margin). */
export const BID_MARGIN = 0.25;

/**
 * Ten times the simulated market's default catalogue, for each policy's own market: an endpoint
 * rents the cheapest fitting offers, each offer one machine, and a market of many offers close in
 * price is what a large real one looks like to a single endpoint.
 */
export const CATALOGUE_SIZE = 3_200;

export interface Setup {
  wallMinutes: number;
  /** Simulated seconds per wall second. */
  factor: number;
  /** Arrivals at the peak, per simulated second. */
  peakPerS: number;
  /** Replicas of the fixed policy: ceil(2 x peak rate x stream length / target_in_flight). */
  fixedReplicas: number;
  tokenDelayMs: number;
  env: Record<string, string>;
  autoscale: { min_replicas: number; max_replicas: number; target_in_flight: number; scale_up_after_s: number; scale_down_after_s: number };
  /** The autoscaled endpoints' scale_down_after_s (wall s) for the day: 10 simulated minutes, under the API's floor. */
  scaleDownAfterS: number;
  market: { catalogue: { size: number }; creatingMs: number; loadingMs: number; modelServerStartMs: number; tokenDelayMs: number; preemptPerHour: number; random: () => number };
  /** Lines that say what each clock is, wall and simulated. */
  describe: string[];
}

export function setupFor(wallMinutes: number, seed: number): Setup {
  const factor = DAY_S / (wallMinutes * 60);
  const wallMs = (simS: number) => (simS * 1000) / factor;
  const simOf = (ms: number) => `${fmtSim((ms / 1000) * factor)}`;
  const peakPerS = PEAK_IN_FLIGHT / STREAM_SIM_S;
  const fixedReplicas = Math.ceil((2 * peakPerS * STREAM_SIM_S) / TARGET_IN_FLIGHT);
  const tokenDelayMs = wallMs(STREAM_SIM_S) / TOKENS;

  const probeMs = Math.round(Math.max(250, wallMs(10)));
  const clocks = {
    GPU_ENDPOINT_PROBE_MS: probeMs,
    GPU_ENDPOINT_READY_AFTER: 2,
    GPU_STATUS_SYNC_MS: Math.round(Math.max(500, wallMs(15))),
    GPU_STATUS_CACHE_MS: 0,
    GPU_ENDPOINT_UNHEALTHY_MS: Math.round(Math.max(4 * probeMs, wallMs(180))),
    GPU_ENDPOINT_START_TIMEOUT_MS: Math.round(Math.max(5_000, wallMs(1_200))),
    // Longer than a stream (and the event loop's delays on top), so that a drain never cuts one.
    GPU_ENDPOINT_DRAIN_MS: Math.round(Math.max(1_000, wallMs(120))),
    GPU_ENDPOINT_FIRST_BYTE_MS: Math.round(Math.max(10_000, wallMs(300))),
    // Through a cold start (5 simulated minutes) plus the load's publication (1 s wall), a
    // controller round and two probes, with room to spare.
    GPU_ENDPOINT_HOLD_MS: Math.round(Math.max(15_000, wallMs(600))),
    // The way back to bids looks again every minute in a real deployment: a simulated minute
    // here (at the default it is a minute of wall time, 144 simulated ones, after the dry spell).
    GPU_ENDPOINT_MIX_RECHECK_MS: Math.round(Math.max(250, wallMs(60))),
  };
  const env = Object.fromEntries(Object.entries(clocks).map(([k, v]) => [k, String(v)]));
  const autoscale = {
    min_replicas: 0,
    max_replicas: fixedReplicas,
    target_in_flight: TARGET_IN_FLIGHT,
    scale_up_after_s: Math.round(120 / factor),
    // The API's floor (30 s): the endpoints are created with it, then given scaleDownAfterS.
    scale_down_after_s: 30,
  };
  // The default 10 simulated minutes, written into each autoscaled endpoint's row after it is
  // created (the controller reads the row every round): at this compression the API's floor of
  // 30 s wall would be 72 simulated minutes, and would keep every replica a scale-up brought (a
  // burst's, a preemption's held requests') seven times as long as the day means to.
  const scaleDownAfterS = Math.max(1, Math.round(600 / factor));
  // The loading time is drawn per rental: the simulated market reads loadingMs once per creation.
  const coldRandom = mulberry32(seed + 1);
  const market = {
    catalogue: { size: CATALOGUE_SIZE },
    creatingMs: wallMs(CREATING_SIM_S),
    get loadingMs() {
      return wallMs(LOADING_SIM_S.min + (LOADING_SIM_S.max - LOADING_SIM_S.min) * coldRandom());
    },
    modelServerStartMs: wallMs(MODEL_START_SIM_S),
    tokenDelayMs,
    preemptPerHour: PREEMPT_PER_SIM_HOUR * factor,
    random: mulberry32(seed + 2),
  };

  const describe = [
    `compression: 24 simulated hours in ${wallMinutes} wall minutes, ${factor.toFixed(0)}x (1 wall s = ${fmtSim(factor)})`,
    `answers: ${ANSWER_TOKENS} streamed tokens ${tokenDelayMs.toFixed(1)} ms apart (${((STREAM_SIM_S * ANSWER_TOKENS) / TOKENS).toFixed(0)} simulated s); peak ${(peakPerS * 60).toFixed(1)} requests per simulated minute (${PEAK_IN_FLIGHT} in flight per endpoint), bursts ${(2 * peakPerS * 60).toFixed(1)}`,
    `cold start on the simulated market: rent ${CREATING_SIM_S} s + boot and load ${LOADING_SIM_S.min}-${LOADING_SIM_S.max} s (uniform, per rental) + model server ${MODEL_START_SIM_S} s = 3 to 5 simulated minutes`,
    `simulated market: one per policy, each of ${CATALOGUE_SIZE} offers (10x its default catalogue, the same for the three); an endpoint rents the cheapest that fit the 'budget' template`,
    `preemptions: ${PREEMPT_PER_SIM_HOUR} per interruptible replica-hour (${market.preemptPerHour.toFixed(1)} per wall hour) plus half of them at 14:00; bids at min_bid x ${1 + BID_MARGIN}`,
    `fixed: ceil(2 x peak rate x stream length / target_in_flight) = ceil(2 x ${PEAK_IN_FLIGHT} / ${TARGET_IN_FLIGHT}) = ${fixedReplicas} replicas (the bursts' load); autoscaled: 0..${fixedReplicas}, target ${TARGET_IN_FLIGHT} in flight`,
    `autoscale: scale_up_after_s ${autoscale.scale_up_after_s} (${simOf(autoscale.scale_up_after_s * 1000)}), scale_down_after_s ${scaleDownAfterS} (${simOf(scaleDownAfterS * 1000)}; under the API's floor of 30 s, written into the endpoints' rows)`,
    "clocks (wall ms = simulated):",
    ...Object.entries(clocks).map(([k, v]) => `  ${k}=${v}${k.endsWith("_MS") && v > 0 ? ` = ${simOf(v)}` : ""}`),
    "  load published by each process every 1000 ms (fixed in the service) = " + simOf(1000),
  ];
  return { wallMinutes, factor, peakPerS, fixedReplicas, tokenDelayMs, env, autoscale, scaleDownAfterS, market, describe };
}

/** Simulated seconds as `45 s`, `2.4 min` or `1.2 h`. */
export function fmtSim(s: number): string {
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} simulated s`;
  if (s < 7_200) return `${(s / 60).toFixed(1)} simulated min`;
  return `${(s / 3_600).toFixed(1)} simulated h`;
}
