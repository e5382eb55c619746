import { createServer } from "node:net";
import { startModelServer, type ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import { bidTotal, dphTotal, type VastAsk } from "./catalogue.js";

// The emulator's rented machines and their rows in vast.ai's wire format
// (api-reference/openapi/yaml/show_instance.yaml): actual_status is null while the machine is
// provisioned, "loading" while the image downloads, then "running" with `ports` (Docker's
// {"8000/tcp": [{HostIp, HostPort}]}). A container whose start failed stays "created" with the
// runtime's error in status_msg. A machine that maps port 8000 and runs `vllm serve <model>` gets
// a real model server on loopback once running; given a key (VLLM_API_KEY in its env or
// `--api-key` in its args, as vLLM takes it), that server demands it on /v1/... (401 without).
// The env comes back in `extra_env` as [name, value] pairs, as vast.ai shows it to the account.
// A bid (`is_bid`) is billed its bid plus storage (dph_base is the bid); outbid, vast.ai stops it
// in one of the two ways SPEC.md names: `actual_status` `stopped` while it is wanted running, or
// the contract's `cur_state`, `next_state` and `intended_status` all `stopped`.

export interface EmulatedInstance {
  id: number;
  askId: number;
  ask: VastAsk;
  label: string;
  image: string;
  disk: number;
  dphTotal: number;
  createdAt: number;
  /** Set by a control: the actual_status from then on. */
  forcedStatus: string | undefined;
  /** The bid, $/h for the machine; undefined: on-demand. */
  bid: number | undefined;
  /** How vast.ai shows it stopped after losing its bid; undefined: not outbid. */
  outbidAs: OutbidForm | undefined;
  startFailed: boolean;
  model: string | undefined;
  /** The key the model server demands; undefined: none. */
  apiKey: string | undefined;
  /** The env the machine was created with, Docker flags left out. */
  env: Array<[string, string]>;
  mapsLlmPort: boolean;
  server: ModelServer | undefined;
  starting: Promise<void> | undefined;
  /** The host port 8000 maps to while the model loads (nothing listens on it yet), then its server's. */
  llmPort: number | undefined;
}

/** The two ways an outbid instance shows: its actual_status, or its contract's three states. */
export type OutbidForm = "actual_status" | "states";

export interface Clock {
  provisioningMs: number;
  loadingMs: number;
  /** How long a running machine's model server takes to load its model before it answers (vLLM's weights load). */
  modelLoadMs: number;
}

export function createInstances(clock: Clock) {
  const all = new Map<number, EmulatedInstance>();
  let nextId = 31_000_001;

  function actualStatus(i: EmulatedInstance): string | null {
    // An unloaded container has no actual status at all: only cur_state says what happened.
    if (i.forcedStatus === "unloaded") return null;
    if (i.outbidAs === "actual_status") return "stopped";
    // The container ended with its contract: what the host last reported.
    if (i.outbidAs === "states") return "exited";
    if (i.forcedStatus !== undefined) return i.forcedStatus;
    const age = Date.now() - i.createdAt;
    if (age < clock.provisioningMs) return null;
    if (i.startFailed) return "created";
    return age < clock.provisioningMs + clock.loadingMs ? "loading" : "running";
  }

  /**
   * Starts the model server the first time a running instance is looked at once its model has
   * loaded; while it loads, port 8000 is mapped to a port where nothing listens yet (as a vLLM
   * container's is), and its server then starts on that port.
   */
  function ensureServer(i: EmulatedInstance): void {
    if (i.server || i.starting || !i.mapsLlmPort || !i.model) return;
    if (Date.now() - i.createdAt < clock.provisioningMs + clock.loadingMs + clock.modelLoadMs) return;
    i.starting = startModelServer({ model: i.model, host: "127.0.0.1", port: i.llmPort, apiKey: i.apiKey, instance: String(i.id) }).then((server) => {
      if (all.has(i.id) && actualStatus(i) === "running") i.server = server;
      else void server.close();
      i.starting = undefined;
    });
  }

  function row(i: EmulatedInstance): Record<string, unknown> {
    const status = actualStatus(i);
    if (status === "running") ensureServer(i);
    const running = status === "running";
    const ports: Record<string, Array<{ HostIp: string; HostPort: string }>> = {};
    if (running) ports["22/tcp"] = [{ HostIp: "0.0.0.0", HostPort: String(40_000 + (i.id % 1000)) }];
    const llmPort = i.server?.port ?? i.llmPort;
    if (running && llmPort !== undefined) ports["8000/tcp"] = [{ HostIp: "0.0.0.0", HostPort: String(llmPort) }];
    return {
      id: i.id,
      machine_id: i.ask.machine_id,
      actual_status: status,
      ...statesOf(i),
      label: i.label,
      image_uuid: i.image,
      status_msg: i.startFailed && status === "created" ? "Error response from daemon: failed to create task for container: OCI runtime create failed: runc create failed" : running ? `success, running ${i.image}` : null,
      public_ipaddr: running ? "127.0.0.1" : "",
      ssh_host: `ssh${i.id % 10}.vast.ai`,
      ssh_port: 20_000 + (i.id % 1000),
      ports: running ? ports : null,
      gpu_name: i.ask.gpu_name,
      num_gpus: i.ask.num_gpus,
      gpu_ram: i.ask.gpu_ram,
      gpu_totalram: i.ask.gpu_total_ram,
      disk_space: i.disk,
      dph_base: i.bid ?? i.ask.dph_base,
      dph_total: i.dphTotal,
      is_bid: i.bid !== undefined,
      min_bid: i.ask.min_bid,
      storage_cost: i.ask.storage_cost,
      geolocation: i.ask.geolocation,
      start_date: i.createdAt / 1000,
      extra_env: i.env,
    };
  }

  function add(ask: VastAsk, fields: Partial<EmulatedInstance>): EmulatedInstance {
    const disk = fields.disk ?? 8;
    const instance: EmulatedInstance = {
      id: nextId++,
      askId: ask.id,
      ask,
      label: "",
      image: "",
      disk,
      dphTotal: dphTotal(ask, disk),
      createdAt: Date.now(),
      forcedStatus: undefined,
      bid: undefined,
      outbidAs: undefined,
      startFailed: false,
      model: undefined,
      apiKey: undefined,
      env: [],
      mapsLlmPort: false,
      server: undefined,
      llmPort: undefined,
      starting: undefined,
      ...fields,
    };
    all.set(instance.id, instance);
    return instance;
  }

  return {
    all,
    row,
    /** A create's machine; a bid below the ask's min_bid is left stopped as an outbid one. */
    async rent(ask: VastAsk, request: Record<string, unknown>, startFails: boolean): Promise<EmulatedInstance> {
      const envMap = typeof request.env === "object" && request.env !== null ? (request.env as Record<string, unknown>) : {};
      const env = Object.keys(envMap);
      const args = Array.isArray(request.args) ? request.args.join(" ") : "";
      const envKey = typeof envMap.VLLM_API_KEY === "string" ? envMap.VLLM_API_KEY : undefined;
      const bid = typeof request.price === "number" ? request.price : undefined;
      const disk = typeof request.disk === "number" ? request.disk : 8;
      const mapsLlmPort = env.some((key) => /^-p 8000:8000$/.test(key.trim()));
      // While the model loads, port 8000 maps to a port nobody listens on yet.
      const llmPort = mapsLlmPort && clock.modelLoadMs > 0 ? await freePort() : undefined;
      return add(ask, {
        bid,
        outbidAs: bid !== undefined && bid < ask.min_bid ? "states" : undefined,
        dphTotal: bid !== undefined ? bidTotal(ask, bid, disk) : dphTotal(ask, disk),
        label: typeof request.label === "string" ? request.label : "",
        image: String(request.image),
        disk,
        startFailed: startFails,
        model: /vllm serve (\S+)/.exec(args)?.[1],
        apiKey: /--api-key (\S+)/.exec(args)?.[1] ?? envKey,
        env: Object.entries(envMap).filter(([name]) => !name.startsWith("-")).map(([name, value]) => [name, String(value)]),
        mapsLlmPort,
        llmPort,
      });
    },
    foreign(ask: VastAsk, label: string): EmulatedInstance {
      return add(ask, { label, image: "pytorch/pytorch:latest" });
    },
    setStatus(id: number, status: string): void {
      const i = all.get(id);
      if (!i) return;
      i.forcedStatus = status;
      if (status !== "running") void i.server?.close().then(() => (i.server = undefined));
    },
    /** vast.ai stops a bid that lost its machine; its model server dies with it. */
    outbid(id: number, form: OutbidForm): void {
      const i = all.get(id);
      if (!i || i.bid === undefined) throw new Error(`instance ${id} is not a bid`);
      i.outbidAs = form;
      void i.server?.close().then(() => (i.server = undefined));
    },
    /** A new bid; one at or above the ask's min_bid brings an outbid instance back. */
    changeBid(i: EmulatedInstance, price: number): void {
      i.bid = price;
      i.dphTotal = bidTotal(i.ask, price, i.disk);
      if (price >= i.ask.min_bid) i.outbidAs = undefined;
    },
    async remove(id: number): Promise<void> {
      const i = all.get(id);
      all.delete(id);
      await i?.starting;
      await i?.server?.close();
    },
    async close(): Promise<void> {
      await Promise.all([...all.keys()].map((id) => this.remove(id)));
    },
  };
}

export type EmulatedInstances = ReturnType<typeof createInstances>;

/** The contract's states: stopped by the owner (exited control), unloaded, outbid, or running. */
function statesOf(i: EmulatedInstance): Record<string, string> {
  if (i.outbidAs === "states") return { intended_status: "stopped", cur_state: "stopped", next_state: "stopped" };
  // Outbid, the machine is stopped while the owner still wants it running, and waits to resume.
  if (i.outbidAs === "actual_status") return { intended_status: "running", cur_state: "stopped", next_state: "running" };
  if (i.forcedStatus === "exited") return { intended_status: "stopped", cur_state: "stopped", next_state: "running" };
  return { intended_status: "running", cur_state: i.forcedStatus === "unloaded" ? "unloaded" : "running", next_state: "running" };
}

/** A loopback port nothing listens on now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}
