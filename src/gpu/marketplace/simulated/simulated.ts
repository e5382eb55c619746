import { ConflictError, InvalidInputError, NotFoundError, OperationFailedError, UnavailableError } from "../../../errors.js";
import { createCatalogue, type CatalogueOptions } from "./catalogue.js";
import { MODEL_API_KEY_ENV, type CreateMarketInstanceRequest, type Marketplace, type MarketInstance, type MarketOffer, type MarketStatus } from "../port.js";
import { startModelServer, type ModelServer } from "./model-server.js";
import { filterOffers } from "../offer-filter.js";
import type { SimHalt, SimRecord, SimStore } from "./simulated-store.js";
import { asBidOffer, minBidOf, preemptionAt } from "./bids.js";
import { checkedSpell, isDry, type DrySpell } from "./dry-spell.js";

// The built-in marketplace: a deterministic catalogue and instances that live in memory, and,
// given a store (simulated-store.ts), in the service's database too: then every call first reads
// the store, every change is written through, and a restarted process resumes the instances and
// their model servers. An
// instance's status is derived from its timestamps (creating until creatingMs, loading until
// runningAt, then running) unless an operator control halted it, so reads need no timers. The only
// timer per instance starts its model server, a real HTTP server on loopback, because GpuService
// must probe it over the network. Bid instances (bids.ts) are preempted at a moment drawn at
// their creation, kept in the store, so that a restarted process preempts them at the same moment.
// A dry spell (dry-spell.ts) leaves it without a rentable offer for a while; `bids: false` makes an
// on-demand-only market, and `pools: true` one whose offers are pools that renting never takes
// (with both, a market that rents as RunPod does).

export interface SimulatedMarketplaceOptions {
  /** How long an instance stays `creating`, in ms. */
  creatingMs: number;
  /** How long it then stays `loading` before `running`, in ms. */
  loadingMs: number;
  /** Delay between `running` and the model server answering, in ms. */
  modelServerStartMs: number;
  /** Time between two tokens of the model servers' answers, ms (their default when absent). */
  tokenDelayMs?: number;
  /** The model servers' time per thousand prompt tokens their prefix cache lacks, ms (theirs when absent: none). */
  prefillMsPerKtoken?: number;
  /** Each model server's prefix-cache budget, tokens (theirs when absent; 0: no prefix caching). */
  kvCacheTokens?: number;
  catalogue?: CatalogueOptions;
  /** Interface the model servers bind; loopback by default. */
  host?: string;
  /** Keeps the instances beyond the process, shared by the processes using the same store. */
  store?: SimStore;
  /** Random preemptions per interruptible instance-hour; 0 or absent: never. */
  preemptPerHour?: number;
  /** Uniform in [0, 1): draws the preemption moments (tests inject it). */
  random?: () => number;
  /** false: an on-demand market that rents no bids (as RunPod); bids by default. */
  bids?: boolean;
  /** A shortage from the start (setDrySpell changes it); none by default. */
  drySpell?: DrySpell;
  /**
   * Every offer a pool (port.ts: stock of a GPU type, as RunPod's catalogue): renting it leaves it
   * rentable, for any number of instances. Not with a store, which keeps one instance per offer.
   */
  pools?: boolean;
}

/** The simulated marketplace with the controls tests and operators use to drive instances. */
export interface SimulatedMarketplace extends Marketplace {
  /** The instance stops (`exited`), its model server with it. */
  exitInstance(id: string): Promise<void>;
  /** An exited, offline or preempted instance runs again at once; its model server starts after the usual delay. */
  restartInstance(id: string): Promise<void>;
  /** The bid instance is preempted as if outbid (`preempted`); its model server stops. */
  preempt(id: string): Promise<void>;
  /** Closes the bid market (every machine outbid by others: no bid offer at all) or opens it again. */
  setBidsOpen(open: boolean): void;
  /** A shortage (dry-spell.ts): no rentable offer during it, bid or on-demand; undefined: none. */
  setDrySpell(spell: DrySpell | undefined): void;
  /** The host drops off the network (`offline`); its model server stops. */
  setOffline(id: string): Promise<void>;
  /** The model server dies while the container keeps running: probes fail. */
  stopModelServer(id: string): Promise<void>;
  /** The model server answers again (now if the instance is running, else once it runs). */
  startModelServer(id: string): Promise<void>;
  /** The next createInstance fails as a provisioning error would; the offer stays rentable. */
  failNextCreate(error?: Error): void;
  /** The next destroyInstance fails, unconfirmed, as a marketplace that did not answer would; the instance stays. */
  failNextDestroy(error?: Error): void;
}

interface SimInstance {
  readonly id: string;
  readonly offer: MarketOffer;
  readonly request: CreateMarketInstanceRequest;
  readonly createdAt: number;
  readonly sshPort: number;
  runningAt: number;
  halted: SimHalt | undefined;
  serverWanted: boolean;
  /** When a bid instance is preempted at random; undefined: never. */
  preemptAt: number | undefined;
  preemptTimer: NodeJS.Timeout | undefined;
  server: ModelServer | undefined;
  /** Last host port of the model server, kept so a restarted server gets the same mapping. */
  hostPort: number | undefined;
  timer: NodeJS.Timeout | undefined;
  starting: Promise<void> | undefined;
  /** Until then another process serves the model server on hostPort (shared store). */
  servedElsewhereUntil: number;
}

/** How long a process leaves a model server to the process that serves it before checking again. */
const SERVED_ELSEWHERE_MS = 5_000;

const FIRST_INSTANCE_ID = 9_100_001;

export function createSimulatedMarketplace(options: SimulatedMarketplaceOptions): SimulatedMarketplace {
  const host = options.host ?? "127.0.0.1";
  const store = options.store;
  const offers = createCatalogue(options.catalogue);
  const offersById = new Map(offers.map((o) => [o.id, o]));
  const instances = new Map<string, SimInstance>();
  let nextId = FIRST_INSTANCE_ID;
  let injectedFailure: Error | undefined;
  let injectedDestroyFailure: Error | undefined;
  let bidsOpen = true;
  const rentsBids = options.bids !== false;
  let drySpell = checkedSpell(options.drySpell);
  let closed = false;
  const random = options.random ?? Math.random;
  const pools = options.pools === true;
  if (pools && store) throw new Error("a simulated market of pools keeps no store: the store holds one instance per offer");

  const isRented = (offerId: string) => !pools && [...instances.values()].some((i) => i.offer.id === offerId);

  /** The catalogue as it stands: an offer rented here is not rentable, unless it is a pool. */
  function currentOffers(): MarketOffer[] {
    const dry = isDry(drySpell);
    return offers.map((o) => ({ ...o, rentable: o.rentable && !dry && !isRented(o.id), ...(pools && { pool: true }) }));
  }

  function statusOf(instance: SimInstance, now = Date.now()): MarketStatus {
    if (instance.halted) return instance.halted;
    if (instance.preemptAt !== undefined && now >= instance.preemptAt) return "preempted";
    if (now >= instance.runningAt) return "running";
    return now < instance.createdAt + options.creatingMs ? "creating" : "loading";
  }

  function view(instance: SimInstance): MarketInstance {
    const status = statusOf(instance);
    const portMappings: Record<string, number> = {};
    if (status !== "creating") portMappings["22/tcp"] = instance.sshPort;
    const { llmPort } = instance.request;
    if (status === "running" && llmPort !== undefined && instance.hostPort !== undefined) {
      portMappings[`${llmPort}/tcp`] = instance.hostPort;
    }
    return {
      id: instance.id,
      offerId: instance.offer.id,
      label: instance.request.label,
      status,
      publicIp: status === "creating" || status === "offline" || status === "preempted" ? "" : host,
      sshPort: status === "creating" ? 0 : instance.sshPort,
      portMappings,
      gpuName: instance.offer.gpuName,
      numGpus: instance.offer.numGpus,
      gpuRam: instance.offer.gpuRam,
      dphTotal: instance.request.bidPerHour ?? instance.offer.dphTotal,
      interruptible: instance.request.bidPerHour !== undefined,
      ...(instance.request.bidPerHour !== undefined && { bidPerHour: instance.request.bidPerHour }),
      machineId: instance.offer.id,
    };
  }

  function recordOf(instance: SimInstance): SimRecord {
    const { id, request, createdAt, runningAt, halted, serverWanted, hostPort, preemptAt } = instance;
    return { id, offerId: instance.offer.id, request, createdAt, runningAt, halted, serverWanted, hostPort, preemptAt };
  }

  function instanceOf(record: SimRecord, offer: MarketOffer): SimInstance {
    return {
      ...record,
      offer,
      sshPort: 20_000 + (Number(record.id) % 40_000),
      server: undefined,
      timer: undefined,
      preemptTimer: undefined,
      starting: undefined,
      servedElsewhereUntil: 0,
    };
  }

  async function persist(instance: SimInstance): Promise<void> {
    await store?.save(recordOf(instance));
  }

  /** Makes this process's view equal to the store's, starting and stopping model servers to match. */
  async function refresh(): Promise<void> {
    if (!store) return;
    const records = await store.load();
    const seen = new Set<string>();
    for (const record of records) {
      const offer = offersById.get(record.offerId);
      if (!offer) continue;
      seen.add(record.id);
      const known = instances.get(record.id);
      const instance = known ? Object.assign(known, { runningAt: record.runningAt, halted: record.halted, serverWanted: record.serverWanted, hostPort: record.hostPort, preemptAt: record.preemptAt }) : instanceOf(record, offer);
      instances.set(record.id, instance);
      await settle(instance);
    }
    for (const [id, instance] of instances) {
      if (seen.has(id)) continue;
      instances.delete(id);
      await bringDown(instance);
    }
  }

  /** The model server runs in this process exactly when the instance wants one and nobody else serves it. */
  async function settle(instance: SimInstance): Promise<void> {
    armPreemption(instance);
    const stopped = instance.halted !== undefined || statusOf(instance) === "preempted";
    const wanted = !stopped && instance.serverWanted && instance.request.llmModelName !== undefined;
    if (!wanted) return bringDown(instance);
    if (!instance.server && !instance.timer && !instance.starting && Date.now() >= instance.servedElsewhereUntil) schedule(instance);
  }

  function find(id: string): SimInstance {
    const instance = instances.get(id);
    if (!instance) throw new NotFoundError(`Instance '${id}' not found on the simulated marketplace`);
    return instance;
  }

  /** Starts the model server when the instance will be running and the server is wanted. */
  function schedule(instance: SimInstance): void {
    clearTimeout(instance.timer);
    if (instance.request.llmModelName === undefined || !instance.serverWanted || closed) return;
    const delay = Math.max(0, instance.runningAt + options.modelServerStartMs - Date.now());
    instance.timer = setTimeout(() => void bringUp(instance), delay);
    instance.timer.unref();
  }

  /** At its preemption moment the instance's model server stops, whether or not anybody reads it. */
  function armPreemption(instance: SimInstance): void {
    clearTimeout(instance.preemptTimer);
    instance.preemptTimer = undefined;
    if (instance.preemptAt === undefined || instance.halted || closed) return;
    const delay = instance.preemptAt - Date.now();
    if (delay <= 0) return;
    instance.preemptTimer = setTimeout(() => void settle(instance), Math.min(delay, 2 ** 31 - 1));
    instance.preemptTimer.unref();
  }

  function bringUp(instance: SimInstance): Promise<void> {
    instance.timer = undefined;
    instance.starting ??= (async () => {
      const model = instance.request.llmModelName;
      if (model === undefined || instance.server || closed) return;
      const server = await startModelServer({
        model,
        host,
        port: instance.hostPort,
        apiKey: instance.request.env[MODEL_API_KEY_ENV],
        instance: instance.id,
        tokenDelayMs: options.tokenDelayMs,
        prefillMsPerKtoken: options.prefillMsPerKtoken,
        kvCacheTokens: options.kvCacheTokens,
      });
      // The instance may have been destroyed, halted or closed while the socket was opening.
      const stillWanted = !closed && instances.get(instance.id) === instance && statusOf(instance) === "running";
      if (!stillWanted || !instance.serverWanted) return server.close();
      if (store && instance.hostPort !== undefined && server.port !== instance.hostPort) {
        // Its port is taken: another process on the same store serves this model server.
        instance.servedElsewhereUntil = Date.now() + SERVED_ELSEWHERE_MS;
        return server.close();
      }
      instance.server = server;
      instance.hostPort = server.port;
      await persist(instance);
    })().finally(() => {
      instance.starting = undefined;
    });
    return instance.starting;
  }

  async function bringDown(instance: SimInstance): Promise<void> {
    clearTimeout(instance.timer);
    instance.timer = undefined;
    await instance.starting?.catch(() => undefined);
    const server = instance.server;
    instance.server = undefined;
    await server?.close();
  }

  async function halt(id: string, state: SimHalt): Promise<void> {
    await refresh();
    const instance = find(id);
    instance.halted = state;
    await persist(instance);
    await bringDown(instance);
  }

  return {
    costIncludes: "the simulated price per hour of the whole machine (dph_total, or the bid of an interruptible one), over the uptime; nothing is billed",
    interruptible: rentsBids,
    async listOffers() {
      await refresh();
      return currentOffers();
    },

    async searchOffers(filter) {
      await refresh();
      // Each simulated offer is a machine of its own: a creation's search says which, for spreading.
      // A pool is no one machine, as RunPod says none.
      const offers = currentOffers().map((o) => (pools ? o : { ...o, machineId: o.id }));
      if (filter.interruptible && !(bidsOpen && rentsBids)) return [];
      if (isDry(drySpell)) return [];
      return filterOffers(filter.interruptible ? offers.map(asBidOffer) : offers, filter);
    },

    async createInstance(request) {
      await refresh();
      const offer = offersById.get(request.offerId);
      if (!offer) throw new NotFoundError(`Offer '${request.offerId}' not found`, { extra: { field: "offer_id" } });
      if (request.bidPerHour !== undefined && !rentsBids) {
        throw new InvalidInputError("This market rents no interruptible instances (no bids): rent it on-demand", { extra: { field: "interruptible" } });
      }
      if (isDry(drySpell)) throw new ConflictError(`Offer '${offer.id}' is not rentable any more: the market has no capacity now`, { extra: { field: "offer_id" } });
      if (!offer.rentable || isRented(offer.id)) {
        throw new ConflictError(`Offer '${offer.id}' is not rentable any more`, { extra: { field: "offer_id" } });
      }
      if (request.bidPerHour !== undefined && !(request.bidPerHour >= minBidOf(offer))) {
        throw new ConflictError(`Offer '${offer.id}' takes bids from $${minBidOf(offer)}/h, not $${request.bidPerHour}/h`, { extra: { field: "offer_id" } });
      }
      if (injectedFailure) {
        const failure = injectedFailure;
        injectedFailure = undefined;
        throw failure;
      }
      const now = Date.now();
      const number = store ? await store.nextId() : nextId++;
      const instance: SimInstance = {
        id: String(number),
        offer,
        request: { ...request, env: { ...request.env } },
        createdAt: now,
        sshPort: 20_000 + (number % 40_000),
        runningAt: now + options.creatingMs + options.loadingMs,
        halted: undefined,
        serverWanted: true,
        preemptAt: request.bidPerHour === undefined ? undefined : preemptionAt(now, options.preemptPerHour ?? 0, random),
        preemptTimer: undefined,
        server: undefined,
        hostPort: undefined,
        timer: undefined,
        starting: undefined,
        servedElsewhereUntil: 0,
      };
      if (store && !(await store.insert(recordOf(instance)))) {
        throw new ConflictError(`Offer '${offer.id}' is not rentable any more`, { extra: { field: "offer_id" } });
      }
      instances.set(instance.id, instance);
      schedule(instance);
      armPreemption(instance);
      return view(instance);
    },

    async getInstance(id) {
      await refresh();
      const instance = instances.get(id);
      return instance && view(instance);
    },

    async listInstances(labelPrefix) {
      await refresh();
      return [...instances.values()].filter((i) => i.request.label.startsWith(labelPrefix)).map(view);
    },

    async destroyInstance(id) {
      const failure = injectedDestroyFailure;
      injectedDestroyFailure = undefined;
      if (failure) throw failure;
      await refresh();
      await store?.remove(id);
      const instance = instances.get(id);
      if (!instance) return;
      instances.delete(id);
      clearTimeout(instance.preemptTimer);
      await bringDown(instance);
    },

    async close() {
      // Only this process's servers stop: with a store, the instances outlive it.
      closed = true;
      for (const instance of instances.values()) clearTimeout(instance.preemptTimer);
      await Promise.all([...instances.values()].map(bringDown));
    },

    exitInstance: (id) => halt(id, "exited"),

    async preempt(id) {
      await refresh();
      const instance = find(id);
      if (instance.request.bidPerHour === undefined) throw new ConflictError(`Instance '${id}' is on-demand: only a bid is preempted`);
      await halt(id, "preempted");
    },
    setOffline: (id) => halt(id, "offline"),

    async restartInstance(id) {
      await refresh();
      const instance = find(id);
      if (!instance.halted && statusOf(instance) !== "preempted") throw new ConflictError(`Instance '${id}' is ${statusOf(instance)}, not exited`);
      instance.halted = undefined;
      instance.runningAt = Math.max(Date.now(), instance.createdAt + options.creatingMs);
      // A bid that resumes runs until its next preemption, drawn from now.
      if (instance.preemptAt !== undefined && instance.preemptAt <= Date.now()) instance.preemptAt = preemptionAt(Date.now(), options.preemptPerHour ?? 0, random);
      await persist(instance);
      schedule(instance);
      armPreemption(instance);
    },

    async stopModelServer(id) {
      await refresh();
      const instance = find(id);
      instance.serverWanted = false;
      await persist(instance);
      await bringDown(instance);
    },

    async startModelServer(id) {
      await refresh();
      const instance = find(id);
      if (instance.request.llmModelName === undefined) {
        throw new ConflictError(`Instance '${id}' was created without a model`);
      }
      instance.serverWanted = true;
      await persist(instance);
      if (statusOf(instance) === "running") await bringUp(instance);
      else schedule(instance);
    },

    failNextCreate(error) {
      injectedFailure = error ?? new OperationFailedError("The marketplace failed to provision the instance");
    },
    setBidsOpen(open) {
      bidsOpen = open;
    },
    setDrySpell(spell) {
      drySpell = checkedSpell(spell);
    },
    failNextDestroy(error) {
      injectedDestroyFailure = error ?? new UnavailableError("The marketplace did not answer the destroy");
    },
  };
}
