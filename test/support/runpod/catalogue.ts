// The emulator's GPU catalogue, in the shape of RunPod's GpuType (GET /v2/catalog/gpus): list
// prices per GPU and cloud, the largest count per cloud, and stock that tests change. Stock is
// given per type and cloud; a count above `stockCount` answers NONE (fewer machines carry many
// GPUs). CUDA versions are offered per type; each is `available` while the type has stock.

export type Cloud = "SECURE" | "COMMUNITY";
export type Level = "NONE" | "LOW" | "MEDIUM" | "HIGH";

export interface EmulatedGpuType {
  id: string;
  name: string;
  pool: string | null;
  memory: number;
  secure: boolean;
  community: boolean;
  price: { secure: number; community: number };
  maxCount: { secure: number; community: number };
  dataCenters: Record<Cloud, Array<{ id: string; name: string }>>;
  cudaVersions: string[];
  /** Stock per cloud. */
  stock: Record<Cloud, Level>;
  /** Counts above this have no stock (NONE), per cloud. */
  stockCount: Record<Cloud, number>;
}

export function createGpuTypes(): EmulatedGpuType[] {
  const kansas = { id: "US-KS-2", name: "US Kansas 2" };
  const romania = { id: "EU-RO-1", name: "EU Romania 1" };
  const texas = { id: "US-TX-3", name: "US Texas 3" };
  return [
    {
      id: "NVIDIA GeForce RTX 4090",
      name: "RTX 4090",
      pool: "ADA_24",
      memory: 24,
      secure: true,
      community: true,
      price: { secure: 0.69, community: 0.34 },
      maxCount: { secure: 8, community: 4 },
      dataCenters: { SECURE: [kansas, romania], COMMUNITY: [romania] },
      cudaVersions: ["12.4", "12.8"],
      stock: { SECURE: "HIGH", COMMUNITY: "MEDIUM" },
      stockCount: { SECURE: 8, COMMUNITY: 4 },
    },
    {
      id: "NVIDIA A100-SXM4-80GB",
      name: "A100 SXM",
      pool: "AMPERE_80",
      memory: 80,
      secure: true,
      community: false,
      price: { secure: 1.49, community: 0 },
      maxCount: { secure: 8, community: 0 },
      dataCenters: { SECURE: [texas], COMMUNITY: [] },
      cudaVersions: ["12.2", "12.4"],
      stock: { SECURE: "LOW", COMMUNITY: "NONE" },
      stockCount: { SECURE: 8, COMMUNITY: 0 },
    },
    {
      id: "NVIDIA H100 80GB HBM3",
      name: "H100 SXM",
      pool: "HOPPER_80",
      memory: 80,
      secure: true,
      community: true,
      price: { secure: 2.69, community: 2.39 },
      maxCount: { secure: 8, community: 8 },
      dataCenters: { SECURE: [kansas, texas], COMMUNITY: [romania] },
      cudaVersions: ["12.4", "12.8"],
      stock: { SECURE: "NONE", COMMUNITY: "LOW" },
      stockCount: { SECURE: 8, COMMUNITY: 2 },
    },
  ];
}

/** The stock of `count` GPUs of the type in the cloud, as the catalogue and a create see it. */
export function stockOf(type: EmulatedGpuType, cloud: Cloud, count: number): Level {
  const offered = cloud === "SECURE" ? type.secure : type.community;
  const max = cloud === "SECURE" ? type.maxCount.secure : type.maxCount.community;
  if (!offered || count > max || count > type.stockCount[cloud]) return "NONE";
  return type.stock[cloud];
}

/** The type as GET /v2/catalog/gpus shows it, with availability for `count` GPUs in `cloud`, CUDA versions at or above `minCuda`. */
export function catalogueRow(type: EmulatedGpuType, count: number, cloud: Cloud, minCuda: number | undefined): Record<string, unknown> {
  const stock = stockOf(type, cloud, count);
  const versions = type.cudaVersions.filter((v) => minCuda === undefined || cudaNumber(v) >= minCuda);
  const availability = versions.length === 0 ? "NONE" : stock;
  return {
    id: type.id,
    name: type.name,
    pool: type.pool,
    manufacturer: "NVIDIA",
    memory: type.memory,
    secure: type.secure,
    community: type.community,
    price: type.price,
    maxCount: type.maxCount,
    availability,
    ...(availability !== "NONE" && { dataCenters: type.dataCenters[cloud].map((d) => ({ ...d, availability })) }),
    ...(versions.length > 0 && { cudaVersions: versions.map((version) => ({ version, available: availability !== "NONE" })) }),
  };
}

/** "12.8" -> 12.08, "12.10" -> 12.1: compared numerically, as RunPod compares versions. */
export function cudaNumber(version: string): number {
  const [major, minor] = version.split(".").map(Number);
  return (major ?? 0) + (minor ?? 0) / 100;
}
