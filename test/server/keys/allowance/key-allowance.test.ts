import { describe, expect, it } from "vitest";
import { type Dimension, KeyAllowance, type LeaseGrant } from "../../../../src/server/keys/allowance/key-allowance.js";
import { type KeyLimits, budgetPeriod, costMicros, estimate, tokenPrice } from "../../../../src/server/keys/allowance/limits.js";
import { openAiDuration, rateLimitFigures, refusal } from "../../../../src/server/keys/allowance/refusal.js";

// The allowance of one key in one process, driven by a fake clock and a hand-made database answer:
// each row reads like a rule of SPEC.md section 2, "Keys for callers".

const T0 = 1_800_000_000_000;
const TTL = 5_000;

function allowanceWith(limits: KeyLimits, granted: Partial<Record<Dimension, number>>, extra: Partial<LeaseGrant> = {}): KeyAllowance {
  const allowance = new KeyAllowance({ limits, createdAtMs: T0 - 3_600_000, leaseTtlMs: TTL, leaseMarginMs: 500 });
  allowance.startReport(T0);
  allowance.reportDone(grant(limits, granted, extra), T0, T0);
  return allowance;
}

function grant(limits: KeyLimits, granted: Partial<Record<Dimension, number>>, extra: Partial<LeaseGrant> = {}): LeaseGrant {
  const of = (d: Dimension, limit: number | undefined) => (limit === undefined ? null : (granted[d] ?? limit));
  return {
    granted: { parallel: of("parallel", limits.maxParallel), requests: of("requests", limits.rpm), tokens: of("tokens", limits.tpm), micros: of("micros", limits.budgetMicros) },
    dbNowMs: T0,
    buckets: [],
    others: { parallel: 0, requests: 0, tokens: 0, micros: 0 },
    spent: 0,
    ...extra,
  };
}

const PRICE = tokenPrice(2, 6); // $2 and $6 per million tokens
const small = estimate({ promptChars: 400, maxTokens: 100 }, 1024, PRICE); // 100 + 100 tokens

describe("a request's hold", () => {
  it.each([
    ["prompt characters / 4 plus max_tokens", { promptChars: 400, maxTokens: 100 }, 200],
    ["a prompt's characters round up", { promptChars: 401, maxTokens: 100 }, 201],
    ["without max_tokens, GPU_KEY_HOLD_TOKENS", { promptChars: 40 }, 1034],
  ])("%s", (_rule, shape, tokens) => {
    expect(estimate(shape, 1024, PRICE).tokens).toBe(tokens);
  });

  it("is priced in integer micro-dollars, rounded up", () => {
    expect(small.micros).toBe(costMicros(PRICE, 100, 100));
    expect(costMicros(PRICE, 100, 100)).toBe(800); // 100 * 2 + 100 * 6 micro-dollars
    expect(costMicros(PRICE, 1, 0)).toBe(2);
    expect(costMicros(tokenPrice(0.15, 0.6), 1, 0)).toBe(1); // 0.15 micro-dollars holds 1
  });
});

describe("the budget period", () => {
  it.each([
    ["starts at the key's creation", 3_600_000, T0 + 10, T0, T0 + 3_600_000],
    ["repeats from it", 3_600_000, T0 + 3_600_000 * 5 + 7, T0 + 3_600_000 * 5, T0 + 3_600_000 * 6],
    ["never resets without a duration", undefined, T0 + 86_400_000 * 90, T0, undefined],
  ])("%s", (_rule, periodMs, now, startsAt, resetsAt) => {
    expect(budgetPeriod(T0, periodMs, now)).toEqual({ startsAt, resetsAt });
  });
});

describe("admission", () => {
  it.each<[string, KeyLimits, Partial<Record<Dimension, number>>, number, string | undefined]>([
    ["admits within every limit", { maxParallel: 2, rpm: 10, tpm: 1000, budgetMicros: 10_000 }, {}, 2, undefined],
    ["max_parallel_requests: a third answer in flight is refused", { maxParallel: 2 }, {}, 3, "parallel_limit"],
    ["rpm_limit: the 11th request of the minute is refused", { rpm: 10 }, {}, 11, "rpm_limit"],
    ["tpm_limit: a hold past the tokens is refused", { tpm: 500 }, {}, 3, "tpm_limit"],
    ["max_budget: a hold past the money is refused", { budgetMicros: 2_000 }, {}, 3, "budget_exceeded"],
    ["a spent budget is named first", { rpm: 1, budgetMicros: 800 }, {}, 2, "budget_exceeded"],
    ["the lease, not the limit, bounds one process", { rpm: 100 }, { requests: 3 }, 4, "rpm_limit"],
  ])("%s", (_rule, limits, granted, requests, refusedWith) => {
    const allowance = allowanceWith(limits, granted);
    const answers = Array.from({ length: requests }, () => allowance.admit(small, T0 + 10));
    expect(answers.slice(0, -1).every((a) => a.admitted)).toBe(true);
    const last = answers.at(-1)!;
    expect(last.admitted ? undefined : last.code).toBe(refusedWith);
  });

  it("names the limit the key lacks, not the first its lease lacks: tpm_limit full, the budget half spent", () => {
    // The database granted no unit (the window holds the whole tpm_limit), so the lease is short of money too.
    const limits = { tpm: 1000, budgetMicros: 100_000 };
    const allowance = allowanceWith(limits, { tokens: 0, micros: 0 }, { buckets: [{ second: T0 / 1000, requests: 5, tokens: 1000 }], spent: 50_000 });
    expect(allowance.admit(small, T0 + 10)).toEqual({ admitted: false, code: "tpm_limit" });
    // The budget spent and the window full: a spent budget is still named first.
    const spent = allowanceWith(limits, { tokens: 0, micros: 0 }, { buckets: [{ second: T0 / 1000, requests: 5, tokens: 1000 }], spent: 99_900 });
    expect(spent.admit(small, T0 + 10)).toEqual({ admitted: false, code: "budget_exceeded" });
    // A lease run out before its renewal, its last answer showing room in both: not a spent budget.
    const waiting = allowanceWith(limits, {});
    expect(waiting.admit(small, T0 + TTL)).toEqual({ admitted: false, code: "tpm_limit" });
  });

  it("needs a lease first: a limited key without one is short", () => {
    const allowance = new KeyAllowance({ limits: { rpm: 10 }, createdAtMs: T0, leaseTtlMs: TTL, leaseMarginMs: 500 });
    expect(allowance.admit(small, T0)).toEqual({ admitted: false, code: "rpm_limit" });
  });

  it("stops using a lease before the database lets it go", () => {
    const allowance = allowanceWith({ rpm: 10 }, {});
    expect(allowance.admit(small, T0 + TTL - 501).admitted).toBe(true);
    expect(allowance.admit(small, T0 + TTL - 500).admitted).toBe(false);
  });

  it("a refusal holds nothing", () => {
    const allowance = allowanceWith({ maxParallel: 5, tpm: 150 }, {});
    expect(allowance.admit(small, T0).admitted).toBe(false);
    expect(allowance.meters.parallel.used).toBe(0);
    expect(allowance.meters.tokens.used).toBe(0);
  });
});

describe("settlement", () => {
  it("turns the hold into what was used, and frees the place in flight", () => {
    const allowance = allowanceWith({ maxParallel: 1, tpm: 1000, budgetMicros: 10_000 }, {});
    const admitted = allowance.admit(small, T0);
    if (!admitted.admitted) throw new Error("refused");
    expect(allowance.admit(small, T0).admitted).toBe(false);
    allowance.settle(admitted.hold, 120, costMicros(PRICE, 100, 20));
    expect(allowance.meters.tokens.used).toBe(120);
    expect(allowance.meters.micros.used).toBe(320);
    expect(allowance.admit(small, T0).admitted).toBe(true);
  });

  it("a hold of a lapsed lease settles nothing: the database counted all of that lease", () => {
    const allowance = allowanceWith({ tpm: 1000 }, {});
    const admitted = allowance.admit(small, T0);
    if (!admitted.admitted) throw new Error("refused");
    allowance.lapse();
    allowance.settle(admitted.hold, 200, 0);
    expect(allowance.meters.tokens.used).toBe(0);
  });
});

describe("an answer past its hold", () => {
  it("takes more per event while the limit has some, then is told to end with the limit's reason", () => {
    const allowance = allowanceWith({ tpm: 203, budgetMicros: 100_000 }, {});
    const admitted = allowance.admit(small, T0);
    if (!admitted.admitted) throw new Error("refused");
    const takes = [1, 1, 1, 1].map(() => allowance.takeMore(admitted.hold, 1, 6, T0));
    expect(takes).toEqual([{ taken: true }, { taken: true }, { taken: true }, { taken: false, code: "tpm_limit" }]);
    expect(admitted.hold.tokens).toBe(203);
  });

  it("a spent budget ends it as insufficient quota", () => {
    const allowance = allowanceWith({ budgetMicros: 806 }, {});
    const admitted = allowance.admit(small, T0);
    if (!admitted.admitted) throw new Error("refused");
    expect(allowance.takeMore(admitted.hold, 1, 6, T0)).toEqual({ taken: true });
    expect(allowance.takeMore(admitted.hold, 1, 6, T0)).toEqual({ taken: false, code: "budget_exceeded" });
  });
});

describe("the lease reports", () => {
  it("carry what ended since the last one, and want what is in flight plus room for the demand", () => {
    const allowance = allowanceWith({ maxParallel: 10, rpm: 100, tpm: 10_000 }, {});
    const a = allowance.admit(small, T0);
    const b = allowance.admit(small, T0);
    if (!a.admitted || !b.admitted) throw new Error("refused");
    allowance.settle(a.hold, 150, 0);
    const report = allowance.startReport(T0 + 1000);
    expect(report.used).toEqual({ parallel: 0, requests: 2, tokens: 150, micros: 0 });
    // Room for twice the two asks, in units of the largest: the lease has them free, so they are
    // kept with the one in flight (200 tokens), and none is asked beside.
    expect(report.keep).toEqual({ parallel: 1 + 4, requests: 4, tokens: 200 + 4 * 200, micros: 0 });
    expect(report.unit).toEqual({ parallel: 1, requests: 1, tokens: 200, micros: 0 });
    expect(report.units).toBe(0);
  });

  it("want about two seconds of the demand: a report sooner than a second after the last wants more per ask", () => {
    const allowance = allowanceWith({ rpm: 1_000 }, {});
    allowance.admit(small, T0);
    expect(allowance.startReport(T0 + 500)).toMatchObject({ keep: { requests: 4 }, units: 0 });
    allowance.admit(small, T0);
    expect(allowance.startReport(T0 + 2_500)).toMatchObject({ keep: { requests: 2 }, units: 0 });
  });

  it("keep only the whole units the lease has free, and ask for the rest", () => {
    const allowance = allowanceWith({ maxParallel: 10, rpm: 100, tpm: 10_000 }, { parallel: 3 });
    const a = allowance.admit(small, T0);
    const b = allowance.admit(small, T0);
    if (!a.admitted || !b.admitted) throw new Error("refused");
    allowance.settle(a.hold, 150, 0);
    const report = allowance.startReport(T0 + 1000);
    // Three places leased, one in flight: two of the four units wanted are kept, two asked for.
    expect(report.keep).toEqual({ parallel: 1 + 2, requests: 2, tokens: 200 + 2 * 200, micros: 0 });
    expect(report.units).toBe(2);
  });

  it("a lease past its time keeps nothing but what is in flight", () => {
    const allowance = allowanceWith({ tpm: 10_000 }, {});
    const a = allowance.admit(small, T0);
    if (!a.admitted) throw new Error("refused");
    const report = allowance.startReport(T0 + TTL);
    expect(report.keep.tokens).toBe(200);
    expect(report.units).toBe(2);
  });

  it("an idle key wants nothing: its lease goes back", () => {
    const allowance = allowanceWith({ rpm: 100 }, {});
    allowance.startReport(T0 + 1000);
    expect(allowance.startReport(T0 + 2000)).toMatchObject({ units: 0, keep: { requests: 0 } });
    expect(allowance.idle).toBe(true);
  });

  it("while a report travels, use stays within what is in flight and the reserve kept: the new lease is sure to hold that", () => {
    const allowance = allowanceWith({ maxParallel: 10, tpm: 10_000 }, {});
    const first = allowance.admit(small, T0);
    allowance.admit(small, T0);
    if (!first.admitted) throw new Error("refused");
    const report = allowance.startReport(T0 + 1000);
    // Admissions go on within the four units kept, no further.
    for (let i = 0; i < 4; i++) expect(allowance.admit(small, T0 + 1001).admitted).toBe(true);
    expect(allowance.admit(small, T0 + 1001).admitted).toBe(false);
    expect(allowance.meters.tokens.used).toBe(report.keep.tokens);
    allowance.settle(first.hold, 100, 0);
    // The ended answer's unused hold is free again, within what the report kept.
    expect(allowance.meters.tokens.cap - allowance.meters.tokens.used).toBe(100);
  });

  it("renew ahead of need: when less than half of what the lease left free is left", () => {
    const allowance = allowanceWith({ tpm: 1_000 }, {});
    expect(allowance.wantsRenewal(T0 + 100)).toBe(false);
    for (let i = 0; i < 2; i++) allowance.admit(small, T0 + 100);
    expect(allowance.wantsRenewal(T0 + 100)).toBe(false);
    allowance.admit(small, T0 + 100);
    expect(allowance.wantsRenewal(T0 + 100)).toBe(true);
  });

  it("renew ahead of need: when less than half of the lease's time is left", () => {
    const allowance = allowanceWith({ tpm: 1_000 }, {});
    expect(allowance.wantsRenewal(T0 + 1_000)).toBe(false);
    expect(allowance.wantsRenewal(T0 + TTL - 500 - TTL / 2 + 1)).toBe(true);
  });

  it("a failed report is sent again: counting twice is safe, once lost is not", () => {
    const allowance = allowanceWith({ rpm: 100 }, {});
    allowance.admit(small, T0);
    allowance.startReport(T0 + 1000);
    allowance.reportFailed();
    expect(allowance.startReport(T0 + 1500).used.requests).toBe(1);
  });
});

describe("what a refused caller is told", () => {
  const full = [
    { second: T0 / 1000 - 30, requests: 6, tokens: 0 },
    { second: T0 / 1000 - 10, requests: 4, tokens: 0 },
  ];

  it("rpm_limit: the whole seconds until a bucket ages out of the window", () => {
    const allowance = allowanceWith({ rpm: 10 }, { requests: 0 }, { buckets: full });
    const admitted = allowance.admit(small, T0);
    expect(admitted).toEqual({ admitted: false, code: "rpm_limit" });
    // The bucket 30 s old counts until 61 s after its second: 31 s more.
    expect(refusal(allowance, "rpm_limit", { parallel: 1, requests: 1, tokens: 200, micros: 0 }, T0)).toEqual({
      code: "rpm_limit",
      type: "rate_limit_exceeded",
      retryAfterS: 31,
    });
  });

  it("budget_exceeded: the seconds until the next period, or none when it never resets", () => {
    const limits = { budgetMicros: 1000, budgetPeriodMs: 3_600_000 };
    const allowance = allowanceWith(limits, { micros: 0 }, { spent: 1000 });
    const asks = { parallel: 1, requests: 1, tokens: 200, micros: 800 };
    expect(refusal(allowance, "budget_exceeded", asks, T0 + 1000)).toEqual({ code: "budget_exceeded", type: "insufficient_quota", retryAfterS: 3599 });
    const forever = allowanceWith({ budgetMicros: 1000 }, { micros: 0 }, { spent: 1000 });
    expect(refusal(forever, "budget_exceeded", asks, T0).retryAfterS).toBeUndefined();
  });

  it("the x-ratelimit figures count the window, the other leases and this process's use", () => {
    const allowance = allowanceWith({ rpm: 20, tpm: 1000 }, {}, { buckets: full, others: { parallel: 0, requests: 3, tokens: 100, micros: 0 } });
    allowance.admit(small, T0);
    expect(rateLimitFigures(allowance, T0)).toEqual({
      requests: { limit: 20, remaining: 20 - 10 - 3 - 1, resetMs: 51_000 },
      tokens: { limit: 1000, remaining: 1000 - 100 - 200, resetMs: 0 },
    });
    expect([openAiDuration(20), openAiDuration(1000), openAiDuration(51_000), openAiDuration(360_000)]).toEqual(["20ms", "1s", "51s", "6m0s"]);
  });
});
