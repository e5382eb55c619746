// The emulator's asks, in vast.ai's wire format (api-reference/openapi/yaml/search_offers.yaml):
// integer ids, gpu_ram in MB per GPU as hosts report it, dph_base for the GPUs and storage_cost
// in $/GB/month, so that dph_total depends on the storage asked for.

export interface VastAsk {
  id: number;
  gpu_name: string;
  num_gpus: number;
  gpu_ram: number;
  gpu_total_ram: number;
  dph_base: number;
  storage_cost: number;
  rentable: boolean;
  verified: boolean;
  geolocation: string;
  machine_id: number;
  disk_space: number;
  reliability: number;
}

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
          storage_cost: 0.1 + p * 0.05,
          rentable: !(count === 4 && p === 3),
          verified: !(count === 1 && p === 2),
          geolocation: place,
          machine_id: 70_000 + m * 100 + count * 10 + p,
          disk_space: 500,
          reliability: 0.99,
        });
      });
    }
  });
  return asks;
}

/** vast.ai's total price: the GPUs plus the storage asked for, per hour. */
export function dphTotal(ask: VastAsk, storageGb: number): number {
  return Math.round((ask.dph_base + (ask.storage_cost * storageGb) / (30 * 24)) * 1_000_000) / 1_000_000;
}
