import type { MarketOffer } from "../port.js";

// The simulated marketplace's offer catalogue. It is generated from a seeded PRNG so every start
// (and every test) sees the same offers, yet it looks like a real spot market: a mix of consumer
// and data-centre GPUs, 1/2/4/8-GPU boxes, per-GPU prices in each model's market band, and a few
// hosts that are listed but not rentable.

interface GpuModel {
  name: string;
  /** GB per GPU. */
  ram: number;
  /** Per-GPU price band in $/h. */
  minPrice: number;
  maxPrice: number;
  /** Relative share of the market. */
  weight: number;
  /** Box sizes this model is sold in. */
  boxes: readonly number[];
}

const CONSUMER = [1, 1, 1, 2, 2, 4, 8] as const;
const WORKSTATION = [1, 1, 2, 4, 8] as const;
const DATACENTRE = [1, 2, 4, 8, 8] as const;

const MODELS: readonly GpuModel[] = [
  { name: "RTX 3060", ram: 12, minPrice: 0.06, maxPrice: 0.11, weight: 6, boxes: CONSUMER },
  { name: "RTX 3070", ram: 8, minPrice: 0.07, maxPrice: 0.12, weight: 4, boxes: CONSUMER },
  { name: "RTX 3090", ram: 24, minPrice: 0.18, maxPrice: 0.3, weight: 9, boxes: CONSUMER },
  { name: "RTX 4090", ram: 24, minPrice: 0.32, maxPrice: 0.55, weight: 10, boxes: CONSUMER },
  { name: "RTX A4000", ram: 16, minPrice: 0.14, maxPrice: 0.22, weight: 5, boxes: WORKSTATION },
  { name: "RTX A5000", ram: 24, minPrice: 0.22, maxPrice: 0.35, weight: 5, boxes: WORKSTATION },
  { name: "RTX A6000", ram: 48, minPrice: 0.45, maxPrice: 0.8, weight: 6, boxes: WORKSTATION },
  { name: "L4", ram: 24, minPrice: 0.35, maxPrice: 0.5, weight: 4, boxes: DATACENTRE },
  { name: "L40S", ram: 48, minPrice: 0.8, maxPrice: 1.1, weight: 4, boxes: DATACENTRE },
  { name: "A100 PCIE", ram: 40, minPrice: 0.85, maxPrice: 1.3, weight: 5, boxes: DATACENTRE },
  { name: "A100 SXM4", ram: 80, minPrice: 1.2, maxPrice: 1.9, weight: 6, boxes: DATACENTRE },
  { name: "H100 SXM", ram: 80, minPrice: 1.9, maxPrice: 3.0, weight: 6, boxes: DATACENTRE },
  { name: "Tesla V100", ram: 16, minPrice: 0.14, maxPrice: 0.28, weight: 3, boxes: DATACENTRE },
  { name: "Tesla V100", ram: 32, minPrice: 0.24, maxPrice: 0.42, weight: 3, boxes: DATACENTRE },
  { name: "Tesla T4", ram: 16, minPrice: 0.09, maxPrice: 0.17, weight: 4, boxes: [1, 1, 2, 4] },
];

const LOCATIONS = ["US-CA", "US-TX", "US-NY", "CA-QC", "DE", "NL", "SE", "NO", "FR", "KR", "JP", "TW", "SG"];

/** Share of hosts that are listed but not rentable (maintenance, verification pending). */
const UNRENTABLE_SHARE = 0.06;

export interface CatalogueOptions {
  /** Same seed, same catalogue. */
  seed?: number;
  /** Number of offers; a few hundred by default. */
  size?: number;
}

export const DEFAULT_CATALOGUE_SEED = 20261121;
export const DEFAULT_CATALOGUE_SIZE = 320;

/** A deterministic, realistic catalogue of offers. */
export function createCatalogue(options: CatalogueOptions = {}): MarketOffer[] {
  const random = mulberry32(options.seed ?? DEFAULT_CATALOGUE_SEED);
  // Host facts come from a stream of their own, so that adding them left every offer as it was.
  const host = mulberry32((options.seed ?? DEFAULT_CATALOGUE_SEED) + 1);
  const size = options.size ?? DEFAULT_CATALOGUE_SIZE;
  const offers: MarketOffer[] = [];
  let nextId = 31_400_000;
  for (let i = 0; i < size; i++) {
    // The first models are guaranteed once each, so even a small catalogue covers every model.
    const model = i < MODELS.length ? MODELS[i]! : pickWeighted(MODELS, random);
    const numGpus = i < MODELS.length ? 1 : pick(model.boxes, random);
    const perGpu = model.minPrice + (model.maxPrice - model.minPrice) * random();
    // Bigger boxes carry a small premium or discount depending on the host.
    const spread = 1 + (random() - 0.5) * 0.08;
    nextId += 1 + Math.floor(random() * 900);
    offers.push({
      id: String(nextId),
      gpuName: model.name,
      numGpus,
      gpuRam: model.ram,
      dphTotal: round(numGpus * perGpu * spread, 4),
      rentable: i < MODELS.length || random() >= UNRENTABLE_SHARE,
      location: pick(LOCATIONS, random),
      ...hostFacts(host, i < MODELS.length),
    });
  }
  return offers;
}

/** CUDA versions hosts' drivers run, newest most common. */
const CUDA_VERSIONS = [12.2, 12.4, 12.6, 12.8, 12.8, 12.9, 12.9, 13.0];
/** Share of hosts behind NAT with no direct port, as on real spot markets. */
const PORTLESS_SHARE = 0.05;

/**
 * Ports, driver CUDA and reliability of an offer's host. A real market lists hosts that cannot
 * serve a model (no direct port, an old driver) among the cheapest; the first offer of each model
 * is a good host, so that every model has one.
 */
function hostFacts(random: () => number, good: boolean): Pick<MarketOffer, "directPortCount" | "cudaMaxGood" | "reliability"> {
  const portless = random() < PORTLESS_SHARE;
  const cuda = pick(CUDA_VERSIONS, random);
  const reliability = round(0.9 + random() * 0.0999, 4);
  if (good) return { directPortCount: 64, cudaMaxGood: 12.9, reliability: 0.995 };
  return { directPortCount: portless ? 0 : 8 * (1 + Math.floor(random() * 16)), cudaMaxGood: cuda, reliability };
}

/** The small, fast, well-distributed PRNG of Tommy Ettinger; enough for a catalogue. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function pick<T>(items: readonly T[], random: () => number): T {
  return items[Math.floor(random() * items.length)]!;
}

function pickWeighted(models: readonly GpuModel[], random: () => number): GpuModel {
  const total = models.reduce((sum, m) => sum + m.weight, 0);
  let roll = random() * total;
  for (const model of models) {
    roll -= model.weight;
    if (roll < 0) return model;
  }
  return models[models.length - 1]!;
}

function round(value: number, decimals: number): number {
  const factor = 10 ** decimals;
  return Math.round(value * factor) / factor;
}
