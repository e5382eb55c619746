import { InvalidInputError } from "../../../errors.js";
import { jsonReader, type Json } from "../http/json-reader.js";
import type { CreateMarketInstanceRequest, MarketInstance, MarketOffer, MarketStatus } from "../port.js";
import { diskPerHour, withDisk } from "./runpod-disk.js";

// RunPod's REST v2 JSON (docs/marketplace-runpod.md; its OpenAPI file is the contract) and its
// mapping to the port's types. Units: `memory` is GB per GPU, `price` $/h per GPU, `cost` the $/h
// billed for the whole pod but its container disk, which the port's prices include
// (runpod-disk.ts). Answers are read field by field: a changed wire format fails with a
// clear error naming the field, never a NaN price or a pod read as gone.

const { object, array, string, number, integer, boolean, optional } = jsonReader("RunPod");

export const CLOUDS = ["SECURE", "COMMUNITY"] as const;
export type Cloud = (typeof CLOUDS)[number];

/** Container disk asked for when the request names none, GB. */
export const DEFAULT_DISK_GB = 16;

/** What an offer is made of: RunPod rents a GPU type, a count of it, in one cloud. */
export interface OfferKey {
  cloud: Cloud;
  count: number;
  /** RunPod's GPU type id, "NVIDIA GeForce RTX 4090". */
  gpuTypeId: string;
}

/**
 * `secure-2x-NVIDIA_GeForce_RTX_4090`: the cloud, the count and the GPU type, stable from one
 * search to the next and free of spaces. The type's id is matched against the catalogue by the
 * same spelling, so it need not be reversible.
 */
export function offerIdOf(key: OfferKey): string {
  return `${key.cloud.toLowerCase()}-${key.count}x-${slugOf(key.gpuTypeId)}`;
}

/** The cloud, count and spelled GPU type of an offer id; undefined when it names no RunPod offer. */
export function parseOfferId(id: string): { cloud: Cloud; count: number; gpuSlug: string } | undefined {
  const match = /^(secure|community)-([1-9]\d?)x-(\S+)$/.exec(id);
  if (!match) return undefined;
  return { cloud: match[1]!.toUpperCase() as Cloud, count: Number(match[2]), gpuSlug: match[3]! };
}

export function slugOf(gpuTypeId: string): string {
  return gpuTypeId.trim().replace(/\s+/g, "_");
}

/** A GPU type of the catalogue, as far as an offer needs it. */
export interface GpuType {
  id: string;
  name: string;
  memory: number;
  /** Per GPU, $/h, by cloud; undefined where the type is not rented in that cloud. */
  price: Record<Cloud, number | undefined>;
  maxCount: Record<Cloud, number>;
  availability: "NONE" | "LOW" | "MEDIUM" | "HIGH";
  dataCenters: string[];
  /** Highest CUDA version with free machines, for the count and cloud asked. */
  cudaMaxGood?: number;
}

const AVAILABILITY = ["NONE", "LOW", "MEDIUM", "HIGH"] as const;

/** GET /v2/catalog/gpus?include=AVAILABILITY&product=POD&count=N&cloud=C. */
export function parseCatalogue(body: unknown): GpuType[] {
  return array(object(body, "answer").gpus, "gpus").map((item, i) => parseGpuType(item, `gpus[${i}]`));
}

function parseGpuType(value: unknown, where: string): GpuType {
  const o = object(value, where);
  const price = object(o.price, `${where}.price`);
  const maxCount = object(o.maxCount, `${where}.maxCount`);
  const secure = boolean(o.secure, `${where}.secure`);
  const community = boolean(o.community, `${where}.community`);
  const availability = string(o.availability, `${where}.availability`);
  if (!(AVAILABILITY as readonly string[]).includes(availability)) throw malformedAt(`${where}.availability`, `one of ${AVAILABILITY.join(", ")}`);
  const dataCenters = optional(array, o.dataCenters, `${where}.dataCenters`) ?? [];
  const cudaVersions = optional(array, o.cudaVersions, `${where}.cudaVersions`) ?? [];
  const available = cudaVersions
    .map((v, i) => object(v, `${where}.cudaVersions[${i}]`))
    .filter((v, i) => boolean(v.available, `${where}.cudaVersions[${i}].available`))
    .map((v, i) => Number(string(v.version, `${where}.cudaVersions[${i}].version`)))
    .filter((v) => Number.isFinite(v));
  return {
    id: string(o.id, `${where}.id`),
    name: string(o.name, `${where}.name`),
    memory: integer(o.memory, `${where}.memory`),
    price: {
      SECURE: secure ? number(price.secure, `${where}.price.secure`) : undefined,
      COMMUNITY: community ? number(price.community, `${where}.price.community`) : undefined,
    },
    maxCount: { SECURE: integer(maxCount.secure, `${where}.maxCount.secure`), COMMUNITY: integer(maxCount.community, `${where}.maxCount.community`) },
    availability: availability as GpuType["availability"],
    dataCenters: dataCenters.map((d, i) => string(object(d, `${where}.dataCenters[${i}]`).id, `${where}.dataCenters[${i}].id`)),
    ...(available.length > 0 && { cudaMaxGood: Math.max(...available) }),
  };
}

/**
 * The offers of one catalogue answer, asked for `count` GPUs in `cloud`: one per GPU type that
 * the cloud rents in that count and that has stock (availability not NONE), priced with the
 * container disk a pod would ask for (`diskGb`).
 */
export function offersOf(types: readonly GpuType[], count: number, cloud: Cloud, diskGb: number): MarketOffer[] {
  return types.flatMap((type) => {
    const price = type.price[cloud];
    if (price === undefined || count > type.maxCount[cloud] || type.availability === "NONE") return [];
    return [offerOf(type, count, cloud, price, diskGb)];
  });
}

function offerOf(type: GpuType, count: number, cloud: Cloud, price: number, diskGb: number): MarketOffer {
  return {
    id: offerIdOf({ cloud, count, gpuTypeId: type.id }),
    gpuName: type.name,
    numGpus: count,
    gpuRam: type.memory,
    dphTotal: withDisk(price * count, diskGb),
    storagePerHour: diskPerHour(diskGb),
    rentable: true,
    location: type.dataCenters.join(", "),
    // A pod publishes the TCP ports it asks for on a public address (runtime.ports).
    directPortCount: 1,
    // A catalogue entry is stock of a GPU type, not one machine: many pods may be rented from it.
    pool: true,
    ...(type.cudaMaxGood !== undefined && { cudaMaxGood: type.cudaMaxGood }),
  };
}

/** The part of a model server's start command RunPod takes: the image's entrypoint is `vllm serve`. */
const VLLM_SERVE = /^\s*vllm\s+serve\s+/;

/**
 * The body of POST /v2/pods, exactly as CreatePodRequest allows (RunPod answers any other field
 * with 422). A pod runs its image's own entrypoint with `args`, so a model server's start command
 * (`vllm serve <model> ...`) goes as its arguments; the model server's port is published as a
 * direct TCP port, never through RunPod's HTTPS proxy.
 */
export function toCreateBody(request: CreateMarketInstanceRequest, key: OfferKey): Json {
  const gpu: Json = { id: key.gpuTypeId, count: key.count };
  const cuda = cudaVersionText(request.minCuda);
  if (cuda !== undefined) gpu.minCudaVersion = cuda;
  const body: Json = {
    name: request.label,
    image: request.image,
    cloud: key.cloud,
    gpu,
    disk: request.diskGb ?? DEFAULT_DISK_GB,
    env: { ...request.env },
  };
  const args = argsOf(request.startCommand);
  if (args !== undefined) body.args = args;
  if (request.llmPort !== undefined) body.ports = [`${request.llmPort}/tcp`];
  return body;
}

function argsOf(startCommand: string): string | undefined {
  if (startCommand.trim() === "") return undefined;
  if (!VLLM_SERVE.test(startCommand)) {
    throw new InvalidInputError("RunPod runs the image's own entrypoint (vLLM's `vllm serve`) with arguments: a start command must begin with `vllm serve`", {
      extra: { field: "start_command" },
    });
  }
  return startCommand.replace(VLLM_SERVE, "").trim();
}

/** 12.1 -> "12.1", 12 -> "12.0": gpu.minCudaVersion is `major.minor`. */
export function cudaVersionText(version: number | undefined): string | undefined {
  if (version === undefined || !Number.isFinite(version) || version <= 0) return undefined;
  const text = String(version);
  return /^\d+\.\d+$/.test(text) ? text : /^\d+$/.test(text) ? `${text}.0` : undefined;
}

/**
 * A pod as the port names it. The address is runtime.ports' public mapping of each TCP port the
 * pod asked for (`ports`); a pod RUNNING before they are all mapped is still loading. Its rate is
 * `cost` with its container disk; a stopped pod (cost 0) keeps no container disk and bills nothing.
 */
export function parsePod(value: unknown, where: string): MarketInstance {
  const o = object(value, where);
  const status = string(o.status, `${where}.status`);
  const cost = number(o.cost, `${where}.cost`);
  const disk = integer(o.disk, `${where}.disk`);
  const gpu = optional(object, o.gpu, `${where}.gpu`);
  const gpuTypeId = gpu ? string(gpu.id, `${where}.gpu.id`) : "";
  const count = gpu ? (optional(integer, gpu.count, `${where}.gpu.count`) ?? 1) : 0;
  const wanted = array(o.ports, `${where}.ports`).flatMap((p, i) => tcpPortOf(string(p, `${where}.ports[${i}]`)));
  const mapped = publicMappingsOf(o.runtime, `${where}.runtime`);
  const allMapped = wanted.every((port) => mapped.ports[`${port}/tcp`] !== undefined);
  const portMappings = Object.fromEntries(wanted.filter((port) => mapped.ports[`${port}/tcp`] !== undefined).map((port) => [`${port}/tcp`, mapped.ports[`${port}/tcp`]!]));
  return {
    id: string(o.id, `${where}.id`),
    offerId: gpu ? offerIdOf({ cloud: cloudOf(o.cloud, `${where}.cloud`), count, gpuTypeId }) : "",
    label: string(o.name, `${where}.name`),
    // A state RunPod added after this adapter: no news of the pod (offline), its word kept beside.
    status: statusOf(status, allMapped) ?? "offline",
    ...(statusOf(status, allMapped) === undefined && { unknownState: status }),
    publicIp: allMapped && wanted.length > 0 ? (mapped.ip ?? "") : "",
    sshPort: 0,
    portMappings: allMapped ? portMappings : {},
    // The pod names its GPU type by id; the adapter puts the catalogue's name and memory in.
    gpuName: gpuTypeId,
    numGpus: count,
    gpuRam: 0,
    dphTotal: cost > 0 ? withDisk(cost, disk) : 0,
    ...(status === "ERROR" && { failure: "RunPod reports the pod's container in an unrecoverable error state (ERROR)" }),
    interruptible: false,
  };
}

/** GET /v2/pods. */
export function parsePodList(body: unknown): MarketInstance[] {
  return array(object(body, "answer").pods, "pods").flatMap((pod, i) => (isTerminated(pod) ? [] : [parsePod(pod, `pods[${i}]`)]));
}

/** Whether a pod row says TERMINATED: RunPod's word for a pod that is gone. */
export function isTerminated(value: unknown): boolean {
  return typeof value === "object" && value !== null && (value as Json).status === "TERMINATED";
}

/**
 * The table of SPEC.md: PROVISIONING creating; STARTING, or RUNNING before the model server's
 * port has a public TCP mapping, loading; RUNNING with it running; EXITED exited; ERROR exited
 * with `failure` set (as vast.ai's container that could not start). TERMINATED is read as gone
 * before this is asked. Undefined for a state this table does not know.
 */
function statusOf(status: string, mapped: boolean): MarketStatus | undefined {
  switch (status) {
    case "PROVISIONING":
      return "creating";
    case "STARTING":
      return "loading";
    case "RUNNING":
      return mapped ? "running" : "loading";
    case "EXITED":
    case "ERROR":
    case "TERMINATED":
      return "exited";
    default:
      return undefined;
  }
}

function cloudOf(value: unknown, where: string): Cloud {
  const cloud = string(value, where);
  if (!(CLOUDS as readonly string[]).includes(cloud)) throw malformedAt(where, "SECURE or COMMUNITY");
  return cloud as Cloud;
}

/** "8000/tcp" -> [8000]; other protocols (RunPod's "8888/http" proxy) -> []. */
function tcpPortOf(spec: string): number[] {
  const match = /^(\d+)\/tcp$/.exec(spec.trim());
  return match ? [Number(match[1])] : [];
}

/** runtime.ports' public TCP mappings ("8000/tcp" -> public port) and the address they are on. */
function publicMappingsOf(runtime: unknown, where: string): { ip: string | undefined; ports: Record<string, number> } {
  const found: { ip: string | undefined; ports: Record<string, number> } = { ip: undefined, ports: {} };
  if (runtime === null || runtime === undefined) return found;
  const ports = optional(array, object(runtime, where).ports, `${where}.ports`) ?? [];
  for (const [i, item] of ports.entries()) {
    const p = object(item, `${where}.ports[${i}]`);
    const ip = optional(string, p.ip, `${where}.ports[${i}].ip`);
    const port = optional(integer, p.public, `${where}.ports[${i}].public`);
    if (p.type !== "tcp" || !ip || port === undefined || port <= 0) continue;
    found.ip ??= ip;
    found.ports[`${integer(p.private, `${where}.ports[${i}].private`)}/tcp`] = port;
  }
  return found;
}

function malformedAt(where: string, expected: string): Error {
  try {
    return jsonReader("RunPod").malformed(where, expected);
  } catch (err) {
    return err as Error;
  }
}

/** The readable part of RunPod's problem+json: `detail`, with the validation `errors` when there are. */
export function runpodErrorText(body: unknown): string | undefined {
  if (typeof body === "string") return body.trim().slice(0, 300) || undefined;
  if (typeof body !== "object" || body === null) return undefined;
  const o = body as Json;
  const detail = typeof o.detail === "string" && o.detail !== "" ? o.detail : typeof o.title === "string" ? o.title : undefined;
  const errors = Array.isArray(o.errors) ? o.errors.filter((e): e is string => typeof e === "string") : [];
  const text = [detail, ...errors].filter(Boolean).join("; ");
  return text ? text.slice(0, 300) : undefined;
}
