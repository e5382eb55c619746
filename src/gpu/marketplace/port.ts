// The marketplace port: what GpuService needs from a GPU cloud marketplace. Each adapter
// implements it: the built-in simulated marketplace (simulated/, the default), vast.ai
// (vastai/), RunPod (runpod/) and a remote marketplace over HTTP (remote/); markets/ puts the
// configured ones behind it as one. The marketplace is the truth about an instance's status.

/** An offer as the marketplace lists it. */
export interface MarketOffer {
  id: string;
  gpuName: string;
  numGpus: number;
  /** GB per GPU. */
  gpuRam: number;
  /** Dollars per hour for the whole machine. */
  dphTotal: number;
  rentable: boolean;
  location: string;
  /** Ports the host publishes directly; absent where the marketplace does not say. */
  directPortCount?: number;
  /** Highest CUDA version the host's driver runs; absent where the marketplace does not say. */
  cudaMaxGood?: number;
  /** Share of time the host's machines stayed up, 0..1; absent where the marketplace does not say. */
  reliability?: number;
  /** Disk the host has free for a machine, GB; absent where the marketplace does not say. */
  diskSpaceGb?: number;
  /**
   * The machine's minimum bid as an interruptible instance, $/h for the whole machine, storage
   * excluded (vast.ai's `min_bid`). Set by an interruptible search; absent where the marketplace
   * has no interruptible machines.
   */
  minBid?: number;
  /**
   * The part of dphTotal that pays for the disk the search priced (`diskGb`), $/h; a bid is
   * billed this on top. Absent where the marketplace prices no storage apart.
   */
  storagePerHour?: number;
  /** The physical machine the offer is on (vast.ai's `machine_id`), for spreading replicas over machines. */
  machineId?: string;
  /** The market (MARKETPLACE's name) that offers it; set by markets/, absent from a bare adapter. */
  market?: string;
  /**
   * True for a pool (a RunPod catalogue entry: a GPU type, count and cloud with stock): renting it
   * takes one of its stock, and any number of live records may rent it at once. Absent or false:
   * one machine (a vast.ai ask), which renting takes, so that a live record holds it.
   */
  pool?: boolean;
}

/** Sort orders of an offer search: price and price per GPU cheapest first, the others largest first. */
export type OfferOrder = "price" | "gpu_ram" | "num_gpus" | "price_per_gpu";

/**
 * An offer search the marketplace answers itself, so that a creation does not download the whole
 * catalogue. Every field is optional; absent means "any".
 */
export interface OfferFilter {
  offerId?: string;
  /** Case-insensitive, ignoring spaces, `_` and `-`; a substring of the offer's GPU name. */
  gpuName?: string;
  maxPrice?: number;
  /** GB per GPU. */
  minGpuRam?: number;
  numGpus?: number;
  /** GPU counts accepted (a template's tensor-parallel sizes). */
  numGpusIn?: readonly number[];
  /** GB over all of the machine's GPUs. */
  minTotalGpuRam?: number;
  /** Hosts whose driver runs at least this CUDA version. */
  minCuda?: number;
  /** Hosts that can publish a port directly (the model server's). */
  directPort?: boolean;
  /** Hosts at least this reliable, 0..1 (vast.ai's floor, VAST_MIN_RELIABILITY). */
  minReliability?: number;
  rentable?: boolean;
  order?: OfferOrder;
  limit?: number;
  /** The disk the create will ask for, GB: some marketplaces price storage into dph_total. */
  diskGb?: number;
  /**
   * Search the interruptible (bid) market: every offer answered has its `minBid`, and its
   * `dphTotal` is its price at that minimum bid (minBid plus storage), which `maxPrice` and the
   * price order apply to.
   */
  interruptible?: boolean;
  /** Only these markets' offers (MARKETPLACE's names; markets/ honours it, a bare adapter is its one market). */
  markets?: readonly string[];
}

/**
 * Status values the marketplace reports. `preempted`: an interruptible instance the marketplace
 * stopped while it was wanted running (outbid on vast.ai); unlike `exited`, its owner did not stop
 * it and its container did not end on its own, and it may resume much later.
 */
export const MARKET_STATUSES = ["creating", "loading", "running", "exited", "offline", "preempted"] as const;
export type MarketStatus = (typeof MARKET_STATUSES)[number];

/** An instance as the marketplace reports it. */
export interface MarketInstance {
  /** The marketplace's own id. */
  id: string;
  offerId: string;
  /** The label given at creation; GpuService uses its instance_id, to reconcile after crashes. */
  label: string;
  status: MarketStatus;
  /** Empty until the machine has an address. */
  publicIp: string;
  sshPort: number;
  /** "8000/tcp" -> public host port. */
  portMappings: Record<string, number>;
  gpuName: string;
  numGpus: number;
  gpuRam: number;
  /** The price actually rented, dollars per hour: for a bid, the bid plus storage. */
  dphTotal: number;
  /** Set when the machine exists but its container could not start (a provisioning error). */
  failure?: string;
  /**
   * The market's own word for a state the adapter does not know (a newer API): `status` then says
   * nothing, and the record keeps its stored status (status-sync.ts).
   */
  unknownState?: string;
  /** Rented as an interruptible bid: the marketplace may preempt it. */
  interruptible: boolean;
  /** The bid, $/h for the whole machine, storage excluded; set for an interruptible instance whose bid the marketplace shows. */
  bidPerHour?: number;
  /** The physical machine it runs on, where the marketplace says. */
  machineId?: string;
  /** The market (MARKETPLACE's name) it is rented on; set by markets/, absent from a bare adapter. */
  market?: string;
}

/**
 * The variable of CreateMarketInstanceRequest.env holding the model server's key: vLLM takes it
 * as `--api-key`, and every marketplace's model servers demand it on /v1/... (SPEC.md section 4).
 */
export const MODEL_API_KEY_ENV = "VLLM_API_KEY";

export interface CreateMarketInstanceRequest {
  offerId: string;
  label: string;
  image: string;
  /** Disk of the machine, GB; the adapter's default when absent. */
  diskGb?: number;
  startCommand: string;
  env: Record<string, string>;
  /** Container port of the model server, when the instance runs one. */
  llmPort?: number;
  /** Model the model server serves, when the instance runs one. */
  llmModelName?: string;
  /**
   * The lowest CUDA version the image needs (the template's min_cuda), where the marketplace
   * places a machine by it (RunPod's gpu.minCudaVersion); others checked it on the offer.
   */
  minCuda?: number;
  /** The offer's terms as the creation's search showed them: what a machine not shown yet is reported with. */
  terms?: Pick<MarketOffer, "gpuName" | "numGpus" | "gpuRam" | "dphTotal">;
  /**
   * Rent as an interruptible bid at this price, $/h for the whole machine, storage excluded (as
   * vast.ai prices bids). The instance's dphTotal is then this bid plus the offer's storagePerHour.
   * Only on a marketplace whose `interruptible` is true.
   */
  bidPerHour?: number;
}

export interface GetInstanceOptions {
  /**
   * Ask the marketplace now, past any cache of recent answers: a caller that has reason to think
   * the instance changed (a failed probe of an interruptible instance) must see it at once.
   */
  fresh?: boolean;
}

export interface Marketplace {
  /** The whole catalogue, rentable or not. */
  listOffers(signal?: AbortSignal): Promise<MarketOffer[]>;
  /** The offers matching the filter, in its order (price by default), at most its limit. */
  searchOffers(filter: OfferFilter, signal?: AbortSignal): Promise<MarketOffer[]>;
  /**
   * Rents an offer. Throws NotFoundError for an unknown offer, ConflictError when it is not
   * rentable, OutcomeUnknownError when it cannot tell whether a machine was rented (the machine,
   * if any, carries the request's label).
   */
  createInstance(request: CreateMarketInstanceRequest, signal?: AbortSignal): Promise<MarketInstance>;
  /** undefined when the marketplace does not know the instance (never created, or gone). */
  getInstance(id: string, signal?: AbortSignal, options?: GetInstanceOptions): Promise<MarketInstance | undefined>;
  /** Every instance the marketplace has for this account whose label starts with the prefix. */
  listInstances(labelPrefix: string, signal?: AbortSignal): Promise<MarketInstance[]>;
  /**
   * Changes the bid of an interruptible instance, $/h for the whole machine, storage excluded;
   * present where the marketplace lets bids change (vast.ai). A preempted bid raised above the
   * market may resume.
   */
  changeBid?(id: string, bidPerHour: number, signal?: AbortSignal): Promise<void>;
  /** Destroys an instance; resolves once the marketplace confirms. Destroying a gone instance succeeds. */
  destroyInstance(id: string, signal?: AbortSignal): Promise<void>;
  /** Releases what the adapter holds (timers, model servers, sockets). */
  close(): Promise<void>;
  /** What the marketplace's price per hour covers, and what it bills beside it: said in cost analysis. */
  readonly costIncludes?: string;
  /** Whether it rents interruptible machines (bids; `interruptible` searches, `bidPerHour` creates). */
  readonly interruptible?: boolean;
  /**
   * How the marketplace's transport answers lately, as the adapter saw it (GET /api/gpu/markets):
   * `rate_limited` or `failing`; absent where the adapter keeps no such state (then it counts as
   * `ok`). Never `blocked`: that state and its probe clock are kept by markets/market-health.ts.
   */
  health?(): MarketHealth;
  /** How long its calls have waited for the market's rate limits; absent where the adapter keeps no limiter. */
  rateLimitWaits?(): RateLimitWaits;
  /** The markets it is made of, each answering for itself: present on markets/'s composite. */
  readonly markets?: MarketDirectory;
}

/** How long a market's calls have waited for its rate limits, since the start. */
export interface RateLimitWaits {
  /** Each time a call was held back: a limiter's turn, or a 429 waited out. */
  count: number;
  /** Their total length, seconds. */
  seconds: number;
}

/** One market's answer to a call made of every market: its items, or why it has none. */
export interface MarketListing<T> {
  market: string;
  ok: boolean;
  items: T[];
  error?: string;
  /** The failure itself, for the caller to answer as it would for one market; never sent. */
  cause?: unknown;
}

/** A configured market as GET /api/gpu/markets shows it. */
export interface MarketState {
  market: string;
  health: MarketHealth;
  /** Whether it rents interruptible machines (bids). */
  interruptible: boolean;
  /** Calls made to it since the start, and how many failed (an answer about an offer is no failure); absent for a bare adapter. */
  calls?: number;
  errors?: number;
  /** The calls' waits for the market's rate limits, where its adapter keeps a limiter. */
  rateLimitWaits?: RateLimitWaits;
}

/** The configured markets behind one Marketplace, in order of preference (markets/several-markets.ts). */
export interface MarketDirectory {
  readonly names: readonly string[];
  /** Each market's whole catalogue, asked at once, each under its own timeout. */
  listOffersEach(signal?: AbortSignal): Promise<MarketListing<MarketOffer>[]>;
  /** Each market's instances whose label starts with the prefix, asked at once; a market that fails says so. */
  listInstancesEach(labelPrefix: string, signal?: AbortSignal): Promise<MarketListing<MarketInstance>[]>;
  states(): MarketState[];
}

/**
 * A marketplace's state as its adapter saw it: `failing` (its last call failed: `error`, since
 * `since`), `rate_limited` (it asked to wait until `until`), `blocked` (it refused the account:
 * a refused key, no balance; `error` says which, `since` when). Auto-picks skip a blocked market.
 */
export interface MarketHealth {
  state: "ok" | "failing" | "rate_limited" | "blocked";
  error?: string;
  since?: Date;
  until?: Date;
}

/** What a bid costs per hour as the marketplace bills it: the bid plus the offer's storage. */
export function bidCostPerHour(offer: Pick<MarketOffer, "storagePerHour">, bidPerHour: number): number {
  return bidPerHour + (offer.storagePerHour ?? 0);
}
