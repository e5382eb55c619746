import { describe, expect, it } from "vitest";
import { autoscale, NO_MEMORY, type AutoscaleMemory, type AutoscaleSettings, type LoadNow } from "../../../src/gpu/endpoints/control/autoscaler.js";

// The autoscaler's rules as a story: the load over time in, the target and its events out.

const SETTINGS: AutoscaleSettings = { minReplicas: 0, maxReplicas: 3, targetInFlight: 4, scaleUpAfterS: 30, scaleDownAfterS: 600 };
const T0 = new Date("2026-11-26T12:00:00Z").getTime();
const at = (s: number) => new Date(T0 + s * 1000);
const load = (inFlight: number, held = 0, lastRequestS: number | null = null): LoadNow => ({
  inFlight,
  held,
  lastRequestAt: lastRequestS === null ? null : at(lastRequestS),
});

/** Runs the autoscaler over samples [second, load], from a target, and returns the target after each and the events. */
function replay(settings: AutoscaleSettings, start: number, samples: Array<[number, LoadNow]>) {
  let target = start;
  let memory: AutoscaleMemory = NO_MEMORY;
  const targets: number[] = [];
  const events: string[] = [];
  for (const [second, now] of samples) {
    const decision = autoscale(settings, target, memory, now, at(second));
    target = decision.target;
    memory = decision.memory;
    targets.push(target);
    if (decision.change) events.push(`${second}s ${decision.change.kind} ${decision.change.from}->${decision.change.to}`);
  }
  return { targets, events };
}

describe("the autoscaler", () => {
  it("wakes an idle endpoint at once when a request is held", () => {
    expect(replay(SETTINGS, 0, [[0, load(0)], [5, load(0, 1)]])).toEqual({ targets: [0, 1], events: ["5s woke 0->1"] });
  });

  it("wakes to what the held requests want, within max", () => {
    expect(replay(SETTINGS, 0, [[0, load(0, 32)]]).events).toEqual(["0s woke 0->3"]);
  });

  it("rises only once wanted stayed above the target for scale_up_after_s, to what held all along", () => {
    const { targets, events } = replay(SETTINGS, 1, [
      [0, load(8)], // wants 2
      [10, load(12)], // wants 3
      [29, load(12)],
      [30, load(12)], // 30 s above: the least wanted in that time was 2
    ]);
    expect(targets).toEqual([1, 1, 1, 2]);
    expect(events).toEqual(["30s scaled 1->2"]);
  });

  it("forgets a rise when the load falls back before scale_up_after_s", () => {
    expect(replay(SETTINGS, 1, [[0, load(8)], [20, load(3)], [40, load(8)], [69, load(8)]]).targets).toEqual([1, 1, 1, 1]);
  });

  it("never passes max_replicas", () => {
    expect(replay(SETTINGS, 1, [[0, load(100)], [30, load(100)]]).targets).toEqual([1, 3]);
  });

  it("rises at once with scale_up_after_s 0", () => {
    expect(replay({ ...SETTINGS, scaleUpAfterS: 0 }, 1, [[0, load(9)]]).events).toEqual(["0s scaled 1->3"]);
  });

  it("falls only after scale_down_after_s below, to the most wanted in that time, and to zero as idle", () => {
    const { targets, events } = replay(SETTINGS, 3, [
      [0, load(4)], // wants 1
      [300, load(0)], // wants 0
      [600, load(0)], // 600 s below 3: the most wanted in that time was 1
      [1199, load(0)],
      [1200, load(0)], // 600 s below 1 with no request: idle
    ]);
    expect(targets).toEqual([3, 3, 1, 1, 0]);
    expect(events).toEqual(["600s scaled 3->1", "1200s idle 1->0"]);
  });

  it("does not fall to zero while requests keep arriving between samples", () => {
    const { targets } = replay(SETTINGS, 1, [
      [0, load(0, 0, -1)],
      [300, load(0, 0, 299)], // a short request came and went
      [600, load(0, 0, 599)],
      [899, load(0, 0, 899)],
      [1400, load(0, 0, 899)],
    ]);
    expect(targets).toEqual([1, 1, 1, 1, 1]);
  });

  it("goes idle scale_down_after_s after the last request, however short it was", () => {
    const { targets, events } = replay(SETTINGS, 1, [
      [0, load(0, 0, -1)],
      [300, load(0, 0, 299)], // a short request came and went between two samples
      [898, load(0, 0, 299)],
      [899, load(0, 0, 299)], // 600 s after it
    ]);
    expect(targets).toEqual([1, 1, 1, 0]);
    expect(events).toEqual(["899s idle 1->0"]);
  });

  it("scales to zero over a simulated day after one short request, sampled every 10 s", () => {
    // Woken, one request at t = 100 s answered between two samples, then silence.
    const samples: Array<[number, LoadNow]> = [];
    for (let s = 0; s <= 86_400; s += 10) samples.push([s, load(0, 0, s >= 105 ? 105 : null)]);
    const { targets, events } = replay({ ...SETTINGS, scaleDownAfterS: 300 }, 1, samples);
    expect(events).toEqual(["410s idle 1->0"]);
    expect(targets.at(-1)).toBe(0);
  });

  it("wakes at once for a request that found it idle and left before any sample held it", () => {
    const { targets, events } = replay(SETTINGS, 0, [
      [0, load(0)],
      [10, load(0, 0, 9.75)], // held 250 ms, or refused with holding off: never seen held
      [20, load(0, 0, 9.75)],
    ]);
    expect(targets).toEqual([0, 1, 1]);
    expect(events).toEqual(["10s woke 0->1"]);
  });

  it("does not wake for the request it went idle after", () => {
    const { targets } = replay(SETTINGS, 1, [
      [0, load(0, 0, 0)],
      [600, load(0, 0, 0)], // idle
      [610, load(0, 0, 0)],
      [3600, load(0, 0, 0)],
    ]);
    expect(targets).toEqual([1, 0, 0, 0]);
  });

  it("keeps min_replicas", () => {
    expect(replay({ ...SETTINGS, minReplicas: 1 }, 2, [[0, load(0)], [600, load(0)]]).targets).toEqual([2, 1]);
  });

  it("moves a target outside new settings into them at once", () => {
    expect(replay({ ...SETTINGS, minReplicas: 2 }, 1, [[0, load(0)]]).events).toEqual(["0s scaled 1->2"]);
    expect(replay({ ...SETTINGS, maxReplicas: 1 }, 3, [[0, load(20)]]).events).toEqual(["0s scaled 3->1"]);
  });

  it("says why in its event: the load and the target per replica", () => {
    const decision = autoscale(SETTINGS, 0, NO_MEMORY, load(2, 1), at(0));
    expect(decision.change?.why).toBe("load 3 (2 in flight, 1 held), 4 per replica: a request is held");
  });
});
