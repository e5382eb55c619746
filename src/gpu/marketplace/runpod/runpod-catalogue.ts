import { unexpectedAnswer, unreadable, type RunpodHttp } from "./runpod-http.js";
import { cudaVersionText, parseCatalogue, type Cloud, type GpuType } from "./runpod-wire.js";

// RunPod's GPU catalogue, one answer per GPU count and cloud (availability is given for the count
// and cloud asked), each kept for a while (catalogueTtlMs): the catalogue is not a reservation and
// stock only shows at create time, so a minute-old answer orders candidates as well as a fresh one.

export interface CatalogueAsk {
  count: number;
  cloud: Cloud;
  minCuda?: number;
}

export interface RunpodCatalogue {
  types(ask: CatalogueAsk): Promise<GpuType[]>;
  /** The GPU type of that id in the latest answer that named it (its name and memory for a pod). */
  known(gpuTypeId: string): GpuType | undefined;
}

const LIST_GPUS = "GET /v2/catalog/gpus";

export function createRunpodCatalogue(http: RunpodHttp, ttlMs: number): RunpodCatalogue {
  const cache = new Map<string, { at: number; types: Promise<GpuType[]> }>();
  const seen = new Map<string, GpuType>();

  async function fetchTypes(ask: CatalogueAsk, cuda: string | undefined): Promise<GpuType[]> {
    const answer = await http({
      endpoint: LIST_GPUS,
      method: "GET",
      path: "/v2/catalog/gpus",
      query: { include: "AVAILABILITY", product: "POD", count: String(ask.count), cloud: ask.cloud, ...(cuda && { minCudaVersion: cuda }) },
    });
    if (answer.status !== 200) throw unexpectedAnswer(answer, "list its GPU types");
    let types: GpuType[];
    try {
      types = parseCatalogue(answer.body);
    } catch (err) {
      unreadable(http.health, err);
    }
    for (const type of types) seen.set(type.id, type);
    return types;
  }

  return {
    types(ask) {
      const cuda = cudaVersionText(ask.minCuda);
      const key = `${ask.cloud}/${ask.count}/${cuda ?? ""}`;
      const cached = cache.get(key);
      if (cached && Date.now() - cached.at < ttlMs) return cached.types;
      // Callers asking together share one call (so no one caller's abort cuts it; the timeout
      // bounds it); a failed answer is not kept.
      const types = fetchTypes(ask, cuda);
      cache.set(key, { at: Date.now(), types });
      types.catch(() => cache.get(key)?.types === types && cache.delete(key));
      return types;
    },
    known: (gpuTypeId) => seen.get(gpuTypeId),
  };
}
