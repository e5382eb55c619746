import type { Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { gigabytes } from "../../../src/gpu/marketplace/vastai/vastai-wire.js";

// The emulator's asks, in vast.ai's wire format (api-reference/openapi/yaml/search_offers.yaml):
// integer ids, gpu_ram in MB per GPU as hosts report it, dph_base for the GPUs and storage_cost
// in $/GB/month, so that dph_total depends on the storage asked for. As on the real market, the
// cheapest host of each model cannot serve a model: behind NAT with no direct port, a driver too
// old for the image's CUDA, or unreliable; and one datacentre partner's (external) host is cheap too.

export interface VastAsk {
  id: number;
  gpu_name: string;
  num_gpus: number;
  gpu_ram: number;
  gpu_total_ram: number;
  dph_base: number;
  /** The lowest bid vast.ai accepts for the machine right now, $/h, storage excluded (interruptible). */
  min_bid: number;
  storage_cost: number;
  rentable: boolean;
  verified: boolean;
  geolocation: string;
  machine_id: number;
  disk_space: number;
  reliability: number;
  reliability2: number;
  direct_port_count: number;
  cuda_max_good: number;
  external: boolean;
}

/** Why the cheapest asks of each model cannot serve, by GPU count (the first place is the cheapest). */
const FLAWS: Record<number, Partial<VastAsk>> = {
  1: { direct_port_count: 0 },
  2: { cuda_max_good: 12.2 },
  4: { reliability: 0.81, reliability2: 0.81 },
};

const MODELS: ReadonlyArray<[name: string, ramMb: number, dphPerGpu: number]> = [
  ["RTX 3090", 24576, 0.22],
  ["RTX 4090", 24564, 0.35],
  ["RTX A5000", 24564, 0.25],
  ["Tesla T4", 15360, 0.12],
  ["RTX 3060", 12288, 0.08],
  ["L40S", 46068, 0.85],
  ["A100 SXM4", 81920, 1.4],
  ["H100 SXM", 81559, 2.4],
];

const PLACES = ["California, US", "Quebec, CA", "Bavaria, DE", "Oslo, NO"];

/** Minimum bids run well below on-demand prices (vast.ai: "often 50%+ cheaper"). */
const BID_SHARE = 0.45;

/** A deterministic catalogue: each model with 1, 2 and 4 GPUs in a few places, one unverified ask per model. */
export function createAsks(): VastAsk[] {
  const asks: VastAsk[] = [];
  let id = 4_200_001;
  MODELS.forEach(([name, ramMb, dph], m) => {
    for (const count of [1, 2, 4]) {
      PLACES.forEach((place, p) => {
        asks.push({
          id: id++,
          gpu_name: name,
          num_gpus: count,
          gpu_ram: ramMb,
          gpu_total_ram: ramMb * count,
          dph_base: Math.round(dph * count * (1 + p * 0.07) * 10_000) / 10_000,
          min_bid: Math.round(dph * count * (1 + p * 0.07) * BID_SHARE * 10_000) / 10_000,
          storage_cost: 0.1 + p * 0.05,
          rentable: !(count === 4 && p === 3),
          verified: !(count === 1 && p === 2),
          geolocation: place,
          machine_id: 70_000 + m * 100 + count * 10 + p,
          disk_space: 500,
          reliability: 0.99,
          reliability2: 0.99,
          direct_port_count: 24,
          cuda_max_good: 12.9,
          external: false,
          ...(p === 0 ? FLAWS[count] : {}),
        });
      });
    }
  });
  asks.push(externalAsk(asks));
  return asks;
}

/** A second, cheaper host of the first model, rented out through a datacentre partner (external). */
export function externalAsk(asks: readonly VastAsk[]): VastAsk {
  const first = asks[0]!;
  return { ...first, id: asks.at(-1)!.id + 1, machine_id: 79_999, dph_base: first.dph_base * 0.8, external: true };
}

/** A host that can serve a model: a direct port, a recent driver, reliable, not external. */
export function canServe(ask: VastAsk, minCuda = 12.8, minReliability = 0.95): boolean {
  return ask.direct_port_count >= 1 && ask.cuda_max_good >= minCuda && ask.reliability2 >= minReliability && !ask.external;
}

/** vast.ai's total price: the GPUs plus the storage asked for, per hour. */
export function dphTotal(ask: VastAsk, storageGb: number): number {
  return Math.round((ask.dph_base + storagePerHour(ask, storageGb)) * 1_000_000) / 1_000_000;
}

/** The storage asked for, per hour (storage_cost is $/GB/month): the search's `storage_total_cost`. */
export function storagePerHour(ask: VastAsk, storageGb: number): number {
  return Math.round(((ask.storage_cost * storageGb) / (30 * 24)) * 1_000_000) / 1_000_000;
}

/** A bid's price: the bid plus the storage asked for, per hour. */
export function bidTotal(ask: VastAsk, bid: number, storageGb: number): number {
  return Math.round((bid + storagePerHour(ask, storageGb)) * 1_000_000) / 1_000_000;
}

/**
 * Whether a template may rent the ask at the given disk: its per-GPU floor and price cap, plus what
 * its model needs (GPU count, total GPU memory, CUDA, a direct port, the reliability floor).
 */
export function fitsTemplate(ask: VastAsk, template: Template, diskGb: number, minReliability = 0.95): boolean {
  const config = template.config!;
  const perGpu = gigabytes(ask.gpu_ram);
  return (
    perGpu >= config.minGpuRam &&
    dphTotal(ask, diskGb) <= config.maxPrice &&
    config.tensorParallelSizes.includes(ask.num_gpus) &&
    ask.num_gpus * perGpu >= config.minTotalGpuRam &&
    canServe(ask, config.minCuda, minReliability)
  );
}
