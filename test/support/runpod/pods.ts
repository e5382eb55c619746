import { startModelServer, type ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import type { Cloud, EmulatedGpuType } from "./catalogue.js";

// The emulator's pods, in RunPod's Pod shape: PROVISIONING, then STARTING, then RUNNING on a
// clock; a RUNNING pod's runtime.ports maps its TCP ports to public ones only after `portLagMs`
// (as RunPod's do, seconds late). A pod whose image runs vLLM (its args begin with a model, as
// `vllm serve`'s do, and it publishes 8000/tcp) gets a real model server on loopback once mapped,
// demanding the key of its env's VLLM_API_KEY. EXITED and ERROR are set by controls; a deleted
// pod is gone from every answer.

export interface PodClock {
  provisioningMs: number;
  startingMs: number;
  /** How long a RUNNING pod waits before runtime.ports shows its public mappings. */
  portLagMs: number;
}

export interface EmulatedPod {
  id: string;
  name: string;
  image: string;
  args: string;
  disk: number;
  ports: string[];
  env: Record<string, string>;
  cloud: Cloud;
  type: EmulatedGpuType;
  count: number;
  dataCenterId: string;
  createdAt: number;
  /** What it bills per hour above its catalogue price (a control: RunPod's `cost` is the pod's own). */
  surcharge: number;
  /** Set by a control: the status from then on (EXITED, ERROR, or a state the contract does not name yet). */
  forced: string | undefined;
  server: ModelServer | undefined;
  starting: Promise<void> | undefined;
}

export interface PodRequest {
  name: string;
  image: string;
  args?: string;
  disk?: number;
  ports?: string[];
  env?: Record<string, string>;
  cloud?: Cloud;
  gpu: { id: string; count?: number };
}

export function createPods(clock: PodClock) {
  const all = new Map<string, EmulatedPod>();
  let next = 1;

  function statusOf(pod: EmulatedPod): string {
    if (pod.forced) return pod.forced;
    const age = Date.now() - pod.createdAt;
    if (age < clock.provisioningMs) return "PROVISIONING";
    return age < clock.provisioningMs + clock.startingMs ? "STARTING" : "RUNNING";
  }

  const mapped = (pod: EmulatedPod) => statusOf(pod) === "RUNNING" && Date.now() - pod.createdAt >= clock.provisioningMs + clock.startingMs + clock.portLagMs;

  function ensureServer(pod: EmulatedPod): void {
    const model = /^\s*(\S+)/.exec(pod.args)?.[1];
    if (pod.server || pod.starting || !model || model.startsWith("-") || !pod.ports.includes("8000/tcp")) return;
    pod.starting = startModelServer({ model, host: "127.0.0.1", apiKey: pod.env.VLLM_API_KEY, instance: pod.id }).then((server) => {
      if (all.get(pod.id) === pod && mapped(pod)) pod.server = server;
      else void server.close();
      pod.starting = undefined;
    });
  }

  /** The public port a TCP port maps to: the model server's for 8000, a made-up one otherwise. */
  function publicPort(pod: EmulatedPod, port: number): number | undefined {
    if (port === 8000 && /^\s*[^-\s]/.test(pod.args)) return pod.server?.port;
    return 40_000 + ((Number(pod.id.slice(2)) * 7 + port) % 20_000);
  }

  function view(pod: EmulatedPod): Record<string, unknown> {
    const status = statusOf(pod);
    if (mapped(pod)) ensureServer(pod);
    const running = status === "RUNNING";
    const tcp = pod.ports.map((p) => /^(\d+)\/tcp$/.exec(p)).filter((m): m is RegExpExecArray => m !== null).map((m) => Number(m[1]));
    const runtimePorts = mapped(pod)
      ? tcp.flatMap((port) => {
          const pub = publicPort(pod, port);
          return pub === undefined ? [] : [{ private: port, public: pub, type: "tcp", ip: "127.0.0.1" }];
        })
      : [];
    const cost = running || status === "STARTING" || status === "PROVISIONING" ? round(priceOf(pod) * pod.count + pod.surcharge) : 0;
    return {
      id: pod.id,
      name: pod.name,
      status,
      actions: status === "EXITED" ? ["start", "terminate"] : ["stop", "restart", "terminate"],
      image: pod.image,
      args: pod.args,
      disk: pod.disk,
      mounts: {},
      ports: pod.ports,
      env: pod.env,
      registry: null,
      gpu: { id: pod.type.id, count: pod.count },
      cloud: pod.cloud,
      dataCenterId: pod.dataCenterId,
      cudaVersion: pod.type.cudaVersions.at(-1) ?? null,
      ssh: { proxy: status === "PROVISIONING" ? null : { host: "ssh.runpod.io", port: 22, username: `${pod.id}-64411eb2`, command: `ssh ${pod.id}-64411eb2@ssh.runpod.io` }, direct: null },
      template: null,
      cost,
      locked: false,
      globalNetworking: { enabled: false },
      runtime: running ? { uptime: Math.floor((Date.now() - pod.createdAt) / 1000), gpus: [], ports: runtimePorts } : null,
      createdAt: new Date(pod.createdAt).toISOString(),
      startedAt: running ? new Date(pod.createdAt + clock.provisioningMs).toISOString() : null,
    };
  }

  return {
    all,
    view,
    add(request: PodRequest, type: EmulatedGpuType, surcharge = 0): EmulatedPod {
      const cloud = request.cloud ?? "SECURE";
      const pod: EmulatedPod = {
        id: `rp${String(next++).padStart(8, "0")}`,
        name: request.name,
        image: request.image,
        args: request.args ?? "",
        disk: request.disk ?? 50,
        ports: request.ports ?? [],
        env: request.env ?? {},
        cloud,
        type,
        count: request.gpu.count ?? 1,
        dataCenterId: type.dataCenters[cloud][0]?.id ?? "US-KS-2",
        createdAt: Date.now(),
        surcharge,
        forced: undefined,
        server: undefined,
        starting: undefined,
      };
      all.set(pod.id, pod);
      return pod;
    },
    force(id: string, status: string): void {
      const pod = all.get(id);
      if (!pod) throw new Error(`no pod ${id}`);
      pod.forced = status;
      void pod.server?.close().then(() => (pod.server = undefined));
    },
    async remove(id: string): Promise<void> {
      const pod = all.get(id);
      all.delete(id);
      await pod?.starting;
      await pod?.server?.close();
    },
    async close(): Promise<void> {
      await Promise.all([...all.keys()].map((id) => this.remove(id)));
    },
  };
}

export type EmulatedPods = ReturnType<typeof createPods>;

function priceOf(pod: EmulatedPod): number {
  return pod.cloud === "SECURE" ? pod.type.price.secure : pod.type.price.community;
}

const round = (value: number) => Math.round(value * 10_000) / 10_000;
