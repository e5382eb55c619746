import { describe, expect, it } from "vitest";
import { createCatalogue, DEFAULT_CATALOGUE_SIZE } from "../../../../src/gpu/marketplace/simulated/catalogue.js";

// The template limits of the contract (SPEC.md section 2), written out independently of src.
const TEMPLATE_LIMITS = [
  { name: "high_performance", minGpuRam: 24, maxPrice: 2.0 },
  { name: "budget", minGpuRam: 8, maxPrice: 0.5 },
  { name: "research", minGpuRam: 16, maxPrice: 1.0 },
];

// Per-GPU price bands a buyer would consider sane for each model, with slack for box spread.
const SANE_PER_GPU: Record<string, [number, number]> = {
  "RTX 3060": [0.04, 0.15],
  "RTX 3070": [0.04, 0.15],
  "RTX 3090": [0.1, 0.4],
  "RTX 4090": [0.2, 0.7],
  "RTX A4000": [0.1, 0.3],
  "RTX A5000": [0.15, 0.45],
  "RTX A6000": [0.3, 1.0],
  L4: [0.25, 0.6],
  L40S: [0.6, 1.3],
  "A100 PCIE": [0.6, 1.5],
  "A100 SXM4": [1.0, 2.2],
  "H100 SXM": [1.5, 3.5],
  "Tesla V100": [0.1, 0.5],
  "Tesla T4": [0.05, 0.25],
};

describe("simulated catalogue", () => {
  const offers = createCatalogue();

  it("is the same on every start and different for another seed", () => {
    expect(createCatalogue()).toEqual(offers);
    expect(createCatalogue({ seed: 7 })).not.toEqual(offers);
  });

  it("holds a few hundred offers with unique string ids", () => {
    expect(offers).toHaveLength(DEFAULT_CATALOGUE_SIZE);
    expect(offers.length).toBeGreaterThanOrEqual(200);
    expect(new Set(offers.map((o) => o.id)).size).toBe(offers.length);
    for (const offer of offers) expect(offer.id).toMatch(/^\d+$/);
  });

  it("covers the common GPU models, 1/2/4/8-GPU boxes and 8 to 80 GB of GPU RAM", () => {
    expect(new Set(offers.map((o) => o.gpuName))).toEqual(new Set(Object.keys(SANE_PER_GPU)));
    expect(new Set(offers.map((o) => o.numGpus))).toEqual(new Set([1, 2, 4, 8]));
    const rams = offers.map((o) => o.gpuRam);
    expect(Math.min(...rams)).toBe(8);
    expect(Math.max(...rams)).toBe(80);
    expect(new Set(offers.filter((o) => o.gpuName === "Tesla V100").map((o) => o.gpuRam))).toEqual(new Set([16, 32]));
  });

  it("prices each box as its GPU count times a per-GPU price in the model's market band", () => {
    for (const offer of offers) {
      const [low, high] = SANE_PER_GPU[offer.gpuName]!;
      const perGpu = offer.dphTotal / offer.numGpus;
      expect(perGpu, `${offer.gpuName} x${offer.numGpus} at ${offer.dphTotal}`).toBeGreaterThanOrEqual(low);
      expect(perGpu, `${offer.gpuName} x${offer.numGpus} at ${offer.dphTotal}`).toBeLessThanOrEqual(high);
    }
    const h100 = offers.filter((o) => o.gpuName === "H100 SXM" && o.numGpus === 1);
    const r3060 = offers.filter((o) => o.gpuName === "RTX 3060" && o.numGpus === 1);
    expect(Math.min(...h100.map((o) => o.dphTotal))).toBeGreaterThan(Math.max(...r3060.map((o) => o.dphTotal)));
  });

  it("lists a few offers that are not rentable", () => {
    const unrentable = offers.filter((o) => !o.rentable).length;
    expect(unrentable).toBeGreaterThan(0);
    expect(unrentable).toBeLessThan(offers.length * 0.2);
  });

  it.each(TEMPLATE_LIMITS)("has rentable offers that satisfy $name and offers that violate each of its limits", (t) => {
    const satisfying = offers.filter((o) => o.rentable && o.gpuRam >= t.minGpuRam && o.dphTotal <= t.maxPrice);
    expect(satisfying.length).toBeGreaterThan(2);
    expect(offers.some((o) => o.rentable && o.gpuRam < t.minGpuRam && o.dphTotal <= t.maxPrice)).toBe(t.minGpuRam > 8);
    expect(offers.some((o) => o.rentable && o.gpuRam >= t.minGpuRam && o.dphTotal > t.maxPrice)).toBe(true);
  });
});
