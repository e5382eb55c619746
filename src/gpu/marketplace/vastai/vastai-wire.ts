import { jsonReader, type Json } from "../http/json-reader.js";
import type { CreateMarketInstanceRequest, MarketInstance, MarketOffer, MarketStatus, OfferFilter, OfferOrder } from "../port.js";

// vast.ai's JSON (docs/marketplace-vastai.md) and its mapping to the port's types. Units: vast.ai's
// gpu_ram is MB per GPU as the host reports it (23028 for a 24 GB A10G), ours nominal GB; ids are integers
// there and strings here. Answers are checked field by field, so a changed wire format fails with
// a clear error instead of putting NaN prices into the database.

const { object, array, string, number, integer, boolean, optional } = jsonReader("vast.ai");

/** vast.ai's names of the models the service's users rent; a gpu_name filter is pushed as `in` these. */
export const VAST_GPU_NAMES = [
  "A10", "A100 PCIE", "A100 SXM4", "A100X", "A40", "A800 PCIE", "B200", "GH200 SXM", "GTX 1080 Ti", "H100 NVL",
  "H100 PCIE", "H100 SXM", "H200", "H200 NVL", "L4", "L40", "L40S", "Q RTX 8000", "RTX 2080 Ti", "RTX 3060",
  "RTX 3070", "RTX 3080", "RTX 3090", "RTX 3090 Ti", "RTX 4060 Ti", "RTX 4070", "RTX 4080", "RTX 4090", "RTX 5090",
  "RTX 6000Ada", "RTX A4000", "RTX A5000", "RTX A6000", "Tesla P100", "Tesla T4", "Tesla V100",
] as const;

/** Disk asked for when the request names none, GB (vast.ai's documented minimum is 8). */
export const DEFAULT_DISK_GB = 16;

const ORDER: Record<OfferOrder, [string, "asc" | "desc"]> = {
  price: ["dph_total", "asc"],
  gpu_ram: ["gpu_ram", "desc"],
  num_gpus: ["num_gpus", "desc"],
  // vast.ai has no price-per-GPU column; the cheapest machines come first and the adapter re-sorts.
  price_per_gpu: ["dph_total", "asc"],
};

const normalized = (name: string) => name.toLowerCase().replace(/[\s_-]+/g, "");

/**
 * The body of POST /api/v0/bundles/ for a filter. Every bound goes to vast.ai; the adapter checks
 * the answer again with the port's own rules (substring GPU names, GB rounding).
 */
export function toSearchBody(filter: OfferFilter): Json {
  const bid = filter.interruptible === true;
  const body: Json = {
    verified: { eq: true },
    // Without a rentable bound vast.ai applies {eq: true}; a named offer is looked up either way.
    rentable: filter.rentable === undefined ? { in: [true, false] } : { eq: filter.rentable },
    // The bid market prices offers at their minimum bid (`min_bid`, the machine without storage).
    type: bid ? "bid" : "on-demand",
    order: [bid && (filter.order ?? "price") === "price" ? ["min_bid", "asc"] : ORDER[filter.order ?? "price"]],
    allocated_storage: filter.diskGb ?? DEFAULT_DISK_GB,
  };
  if (filter.offerId !== undefined) body.id = { eq: Number(filter.offerId) };
  // Hosts of vast.ai's datacentre partners rent on other terms: a search leaves them out (as
  // vast-cli does); an ask named by its id is looked up as it is.
  else body.external = { eq: false };
  if (filter.gpuName) body.gpu_name = gpuNameBound(filter.gpuName);
  // A bid's price is min_bid plus storage: min_bid alone is a loose bound, re-checked on the answer.
  if (filter.maxPrice !== undefined) body[bid ? "min_bid" : "dph_total"] = { lte: filter.maxPrice };
  // A bound on what hosts report, loose enough for every card that snaps to the floor; the answer is re-checked.
  if (filter.minGpuRam !== undefined && filter.minGpuRam > 0) body.gpu_ram = { gte: minMegabytes(filter.minGpuRam) };
  if (filter.numGpus !== undefined) body.num_gpus = { eq: filter.numGpus };
  else if (filter.numGpusIn !== undefined) body.num_gpus = { in: [...filter.numGpusIn] };
  if (filter.minTotalGpuRam !== undefined) body.gpu_total_ram = { gte: minMegabytes(filter.minTotalGpuRam) };
  if (filter.minCuda !== undefined) body.cuda_max_good = { gte: filter.minCuda };
  if (filter.minReliability !== undefined) body.reliability2 = { gte: filter.minReliability };
  if (filter.directPort) body.direct_port_count = { gte: 1 };
  // A named ask is looked up by its id alone, so that one lacking the disk is refused saying so.
  if (filter.diskGb !== undefined && filter.offerId === undefined) body.disk_space = { gte: filter.diskGb };
  if (filter.limit !== undefined) body.limit = filter.limit;
  return body;
}

/** vast.ai matches names exactly: the known names containing the text, else the text itself. */
function gpuNameBound(name: string): Json {
  const wanted = normalized(name);
  const known = VAST_GPU_NAMES.filter((n) => normalized(n).includes(wanted));
  return known.length > 0 ? { in: known } : { eq: name.replace(/_/g, " ") };
}

/** The offers of a search answer; `interruptible` when it searched the bid market (each offer then has its min_bid). */
export function parseOffers(body: unknown, interruptible = false): MarketOffer[] {
  return array(object(body, "answer").offers, "offers").map((item, i) => {
    const offer = parseOffer(item, `offers[${i}]`);
    if (!interruptible) return offer;
    const minBid = number(object(item, `offers[${i}]`).min_bid, `offers[${i}].min_bid`);
    // In the bid market an offer costs its minimum bid plus the storage asked for.
    return { ...offer, minBid, dphTotal: round6(minBid + (offer.storagePerHour ?? 0)) };
  });
}

function parseOffer(value: unknown, where: string): MarketOffer {
  const o = object(value, where);
  const storage = storagePerHourOf(o);
  return {
    id: String(integer(o.id, `${where}.id`)),
    gpuName: string(o.gpu_name, `${where}.gpu_name`),
    numGpus: integer(o.num_gpus, `${where}.num_gpus`),
    gpuRam: gigabytes(number(o.gpu_ram, `${where}.gpu_ram`)),
    dphTotal: number(o.dph_total, `${where}.dph_total`),
    rentable: boolean(o.rentable, `${where}.rentable`),
    location: typeof o.geolocation === "string" ? o.geolocation : "",
    // The search bounds these facts already; an offer that leaves one out is checked on the rest.
    directPortCount: optional(integer, o.direct_port_count, `${where}.direct_port_count`),
    cudaMaxGood: optional(number, o.cuda_max_good, `${where}.cuda_max_good`),
    reliability: optional(number, o.reliability2 ?? o.reliability, `${where}.reliability2`),
    diskSpaceGb: optional(number, o.disk_space, `${where}.disk_space`),
    ...(storage !== undefined && { storagePerHour: storage }),
    ...(Number.isInteger(o.machine_id) && { machineId: String(o.machine_id) }),
  };
}

/**
 * What the offer's storage costs per hour at the search's allocated_storage: `storage_total_cost`
 * as the search shows it, else what dph_total holds beyond the GPUs (dph_base).
 */
function storagePerHourOf(o: Json): number | undefined {
  if (typeof o.storage_total_cost === "number" && o.storage_total_cost >= 0) return o.storage_total_cost;
  const extra = typeof o.dph_total === "number" && typeof o.dph_base === "number" ? o.dph_total - o.dph_base : undefined;
  return extra !== undefined && extra >= 0 ? round6(extra) : undefined;
}

const round6 = (value: number) => Math.round(value * 1_000_000) / 1_000_000;

/** The body of PUT /api/v0/asks/{id}/: an on-demand rental of the ask, or a bid on it (`price`, $/h per machine). */
export function toCreateBody(request: CreateMarketInstanceRequest): Json {
  const env: Record<string, string> = { ...request.env };
  // vast.ai takes port mappings as Docker flags among the env keys.
  if (request.llmPort !== undefined) env[`-p ${request.llmPort}:${request.llmPort}`] = "1";
  const body: Json = {
    client_id: "me",
    image: request.image,
    disk: request.diskGb ?? DEFAULT_DISK_GB,
    label: request.label,
    env,
    cancel_unavail: true,
    ...(request.bidPerHour !== undefined && { price: request.bidPerHour }),
  };
  if (request.startCommand === "") return { ...body, runtype: "ssh" };
  // In the args launch mode `onstart` replaces the image's entrypoint and `args` follow it, so the
  // start command runs under a shell whatever entrypoint the image has.
  return { ...body, runtype: "args", onstart: "/bin/sh", args: ["-c", request.startCommand] };
}

/** The instance of GET /api/v0/instances/{id}/; undefined when vast.ai answers `instances: null`. */
export function parseShownInstance(body: unknown): MarketInstance | undefined {
  const row = object(body, "answer").instances;
  return row === null || row === undefined ? undefined : parseInstance(row, "instances");
}

/** One page of GET /api/v1/instances/. */
export function parseInstancePage(body: unknown): { instances: MarketInstance[]; nextToken: string | undefined } {
  const o = object(body, "answer");
  const instances = array(o.instances, "instances").map((item, i) => parseInstance(item, `instances[${i}]`));
  const next = o.next_token;
  return { instances, nextToken: typeof next === "string" && next !== "" ? next : undefined };
}

export function parseInstance(value: unknown, where: string): MarketInstance {
  const o = object(value, where);
  const ports = portMappingsOf(o.ports);
  const failure = failureOf(o);
  return {
    id: String(integer(o.id, `${where}.id`)),
    // vast.ai's instance rows do not name the ask they rented; the create fills it in.
    offerId: "",
    label: typeof o.label === "string" ? o.label : "",
    status: marketStatusOf(o),
    publicIp: typeof o.public_ipaddr === "string" ? o.public_ipaddr.trim() : "",
    // The record's SSH endpoint is public_ip:ssh_port, so the port is the one mapped to the
    // container's 22 on the public address. vast.ai's ssh_port belongs to its proxy (ssh_host).
    sshPort: ports["22/tcp"] ?? 0,
    portMappings: ports,
    gpuName: string(o.gpu_name, `${where}.gpu_name`),
    numGpus: integer(o.num_gpus, `${where}.num_gpus`),
    gpuRam: gigabytes(number(o.gpu_ram, `${where}.gpu_ram`)),
    dphTotal: number(o.dph_total, `${where}.dph_total`),
    ...(failure !== undefined && { failure }),
    interruptible: o.is_bid === true,
    ...(Number.isInteger(o.machine_id) && { machineId: String(o.machine_id) }),
  };
}

/**
 * The port's status of a vast.ai instance row (the table of docs/marketplace-vastai.md). A bid
 * stopped by vast.ai is `preempted`. Only a stop (asked for by the owner, or the host's) and an
 * ended container are `exited`; a host that is
 * rebooting comes back through `loading`; no heartbeat or a frozen host is `offline`, transient.
 */
export function marketStatusOf(row: Json): MarketStatus {
  const actual = typeof row.actual_status === "string" ? row.actual_status : "";
  if (failureOf(row) !== undefined) return "exited";
  // The host unloaded the container (whatever actual_status says, often nothing): it is not coming back.
  if (row.cur_state === "unloaded") return "exited";
  if (isOutbid(row)) return "preempted";
  const stopped = row.intended_status === "stopped" || row.cur_state === "stopped";
  if (stopped) return actual === "offline" || actual === "unknown" ? "offline" : "exited";
  switch (actual) {
    case "":
    case "created":
    case "scheduling":
      return "creating";
    case "loading":
    case "rebooting":
      return "loading";
    case "running":
      return "running";
    case "exited":
    case "stopped":
      return "exited";
    default:
      return "offline"; // "offline", "unknown", "frozen", anything new: not known to have ended.
  }
}

/**
 * A bid vast.ai stopped (outbid: its processes killed, its storage still billed; it may resume
 * much later). The service never stops a machine itself, so a bid shown stopped was stopped by
 * vast.ai: `actual_status` `stopped`, or the contract's `cur_state`, `next_state` and
 * `intended_status` all `stopped`. An on-demand machine is never outbid.
 */
function isOutbid(row: Json): boolean {
  if (row.is_bid !== true) return false;
  return row.actual_status === "stopped" || (row.cur_state === "stopped" && row.next_state === "stopped" && row.intended_status === "stopped");
}

/** A container that could not start: vast.ai leaves it `created` with the runtime's error in status_msg. */
function failureOf(row: Json): string | undefined {
  const message = typeof row.status_msg === "string" ? row.status_msg : "";
  const failed = /OCI runtime|Error response from daemon/i.test(message) && row.actual_status !== "running";
  return failed ? message.slice(0, 300) : undefined;
}

/** `{"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "33526"}]}` -> `{"8000/tcp": 33526}`. */
function portMappingsOf(value: unknown): Record<string, number> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return {};
  const mappings: Record<string, number> = {};
  for (const [key, bindings] of Object.entries(value as Json)) {
    const first = Array.isArray(bindings) ? (bindings[0] as Json | undefined) : undefined;
    const port = Number(first?.HostPort);
    if (Number.isInteger(port) && port > 0) mappings[key] = port;
  }
  return mappings;
}

/** The memory sizes GPUs are sold with, GB. */
const NOMINAL_GB = [4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 180, 192];
/** How far a host's report may fall from the nominal size (gpuhunt snaps within 7% too). */
const NOMINAL_TOLERANCE = 0.07;

/**
 * MB as the host reports it to the size users name the card by: vast.ai shows what the driver
 * reports (an A10G 23028 MB, an L40S 46068 MB), which snaps to the nearest nominal size within 7%
 * (24 GB, 48 GB); anything else rounds to whole GB.
 */
export function gigabytes(mb: number): number {
  const gb = mb / 1024;
  let best: number | undefined;
  for (const size of NOMINAL_GB) {
    if (Math.abs(gb - size) <= size * NOMINAL_TOLERANCE && (best === undefined || Math.abs(gb - size) < Math.abs(gb - best))) best = size;
  }
  return best ?? Math.round(gb);
}

/** The least MB a host may report for a card of at least `gb` GB as gigabytes() names it. */
export function minMegabytes(gb: number): number {
  return Math.floor(Math.min(gb * (1 - NOMINAL_TOLERANCE), gb - 0.5) * 1024);
}
