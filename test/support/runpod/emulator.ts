import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { catalogueRow, createGpuTypes, cudaNumber, stockOf, type Cloud, type EmulatedGpuType, type Level } from "./catalogue.js";
import { parameterViolations, violations } from "./contract.js";
import { createPods, type EmulatedPod, type PodRequest } from "./pods.js";

// A RunPod REST v2 emulator written from RunPod's OpenAPI file (runpod-v2-openapi.json): the calls
// GpuService makes, Bearer auth (401), request bodies checked against the contract (an unknown
// field is a 422 listing each violation), problem+json errors, the RateLimit and RateLimit-Policy
// headers on every answer and a 429 with Retry-After (integer seconds) past the window's quota,
// the catalogue's availability for the count and cloud asked, a create refused 400 for want of
// capacity, pods that go PROVISIONING -> STARTING -> RUNNING and get their public ports late.
// Every answer it sends is checked against the contract too: a breach answers 500 and is kept in
// `breaches`, so the adapter is never tested against answers RunPod cannot give.

export interface RunpodRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  body: unknown;
  at: number;
  status?: number;
}

export interface RunpodEmulatorOptions {
  apiKey: string;
  provisioningMs?: number;
  startingMs?: number;
  /** How long a RUNNING pod waits before runtime.ports shows its mappings; default 0. */
  portLagMs?: number;
  /** Requests per window (RateLimit-Policy's q); default 1000. */
  quota?: number;
  /** The window, seconds (w); default 60. */
  windowS?: number;
}

/** What RunPod answers a create it cannot place (documented only as a 400 with a human-readable detail). */
export const NO_CAPACITY = "There are no longer any instances available with the requested specifications. Please refresh and try again.";

/** A route's "status" for a connection dropped before any answer. */
const DROPPED = -1;

export interface RunpodEmulator {
  readonly url: string;
  readonly requests: RunpodRequest[];
  readonly gpuTypes: EmulatedGpuType[];
  readonly pods: Map<string, EmulatedPod>;
  /** Answers that broke the contract (each also answered 500). */
  readonly breaches: string[];
  /** The type's stock in the cloud from now on; `upToCount` also bounds the counts that have any. */
  setStock(gpuTypeId: string, cloud: Cloud, level: Level, upToCount?: number): void;
  /** Pods created from now on bill this much more per hour than the catalogue's price for them, $/h. */
  billAbove(dollarsPerHour: number): void;
  /** The next create is refused: 400 (no capacity), 401 (key), 402 (balance), 403 (pool). */
  refuseNextCreate(status: 400 | 401 | 402 | 403): void;
  /** The next `count` requests answer 429 with this Retry-After, seconds. */
  throttle(count: number, retryAfterS: number): void;
  /** The next `count` requests answer this status without being handled. */
  failNext(count: number, status: number): void;
  /** The next `count` creates rent the pod, then answer this status (a 5xx that did its work) or drop the connection. */
  failCreatesAfterRenting(count: number, status: number | "drop"): void;
  /** The next `count` creates rent nothing and answer this status. */
  failCreatesBeforeRenting(count: number, status: number): void;
  /** Every request waits this long before it is handled (a hang, past the caller's timeout). */
  delay(ms: number): void;
  /** Runs when a create arrives, before it is handled (e.g. to change the stock between two creates). */
  onCreate(hook: ((body: unknown) => void) | undefined): void;
  /** Creates rent at once but answer only this much later. */
  answerCreatesAfter(ms: number): void;
  /** New pods are left out of GET /v2/pods for this long, as a lagging listing would. */
  listLag(ms: number): void;
  /** The next `count` answers of GET /v2/pods and GET /v2/pods/{id} lack a field the contract requires. */
  corruptNext(count: number): void;
  /**
   * The pod's status from now on: EXITED, ERROR, or a state RunPod's contract does not name yet
   * (as a newer API would add one): that word alone is let through the answers' contract check.
   */
  setStatus(id: string, status: string): void;
  /** A pod somebody else created on the account, with their name. */
  addForeignPod(name: string): string;
  close(): Promise<void>;
}

export async function startRunpodEmulator(options: RunpodEmulatorOptions): Promise<RunpodEmulator> {
  const gpuTypes = createGpuTypes();
  const pods = createPods({ provisioningMs: options.provisioningMs ?? 50, startingMs: options.startingMs ?? 50, portLagMs: options.portLagMs ?? 0 });
  const requests: RunpodRequest[] = [];
  const breaches: string[] = [];
  const newerStates = new Set<string>();
  const quota = options.quota ?? 1000;
  const windowMs = (options.windowS ?? 60) * 1000;
  const window = { start: Date.now(), used: 0 };
  const switches = {
    refuse: undefined as undefined | 400 | 401 | 402 | 403,
    throttle: 0,
    retryAfterS: 1,
    fail: 0,
    failStatus: 503,
    failAfterRenting: 0,
    failAfterRentingStatus: 500 as number | "drop",
    failBeforeRenting: 0,
    failBeforeRentingStatus: 500,
    delayMs: 0,
    createAnswerMs: 0,
    listLagMs: 0,
    corrupt: 0,
    surcharge: 0,
  };

  let createHook: ((body: unknown) => void) | undefined;

  const server = createServer((req, res) => {
    void serve(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, problem(500, String(err)));
    });
  });

  function rateHeaders(): Record<string, string> {
    const now = Date.now();
    if (now - window.start >= windowMs) Object.assign(window, { start: now, used: 0 });
    const resetS = Math.max(1, Math.ceil((window.start + windowMs - now) / 1000));
    return {
      ratelimit: `"minute";r=${Math.max(0, quota - window.used)};t=${resetS}`,
      "ratelimit-policy": `"minute";q=${quota};w=${windowMs / 1000}`,
    };
  }

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://runpod");
    const method = req.method ?? "";
    const raw = await readBody(req);
    const entry: RunpodRequest = { method, path: url.pathname, query: url.searchParams, body: undefined, at: Date.now() };
    requests.push(entry);
    res.on("finish", () => (entry.status = res.statusCode));
    if (switches.delayMs > 0) await sleep(switches.delayMs);
    if (req.headers.authorization !== `Bearer ${options.apiKey}`) {
      return send(res, 401, problem(401, req.headers.authorization ? "invalid bearer token" : "missing bearer token"));
    }
    const headers = rateHeaders();
    if (switches.throttle > 0) {
      switches.throttle--;
      return send(res, 429, problem(429, "rate limit exceeded for the minute window"), { ...headers, "retry-after": String(switches.retryAfterS) });
    }
    if (window.used >= quota) {
      const resetS = Math.max(1, Math.ceil((window.start + windowMs - Date.now()) / 1000));
      return send(res, 429, problem(429, "rate limit exceeded for the minute window"), { ...headers, "retry-after": String(resetS) });
    }
    window.used++;
    const counted = rateHeaders();
    let body: unknown;
    try {
      body = raw === "" ? undefined : JSON.parse(raw);
    } catch {
      return send(res, 400, problem(400, "request body is not valid JSON"), counted);
    }
    entry.body = body;
    if (switches.fail > 0) {
      switches.fail--;
      return send(res, switches.failStatus, problem(switches.failStatus, switches.failStatus >= 500 ? "upstream unavailable" : "request refused"), counted);
    }
    const [status, answer, schema] = await route(method, url.pathname, url.searchParams, body);
    if (status === DROPPED) return void req.socket.destroy();
    if (schema && status < 300) {
      const broken = violations(schema, answer).filter((v) => !(newerStates.size > 0 && NEWER_STATE_MISS.test(v)));
      if (broken.length > 0) {
        breaches.push(`${method} ${url.pathname}: ${broken.join("; ")}`);
        return send(res, 500, problem(500, "emulator answer breaks the contract"), counted);
      }
    }
    send(res, status, answer, counted);
  }

  type Answer = [number, unknown, string?];

  async function route(method: string, path: string, query: URLSearchParams, body: unknown): Promise<Answer> {
    const one = /^\/v2\/pods\/([^/]+)$/.exec(path);
    if (method === "GET" && path === "/v2/catalog/gpus") return catalogue(query);
    if (method === "POST" && path === "/v2/pods") return create(body);
    if (method === "GET" && path === "/v2/pods") return list();
    if (method === "GET" && one) return show(one[1]!);
    if (method === "DELETE" && one) return remove(one[1]!);
    return [404, problem(404, "resource not found")];
  }

  function catalogue(query: URLSearchParams): Answer {
    const include = query.get("include");
    const product = query.get("product");
    const scoped = ["count", "cloud", "minCudaVersion", "cudaVersions", "product"].filter((name) => query.has(name));
    if (include === null && scoped.length > 0) return [400, problem(400, `${scoped.join(", ")} valid only with include=AVAILABILITY`)];
    const count = query.has("count") ? Number(query.get("count")) : 1;
    const broken = [
      ...(include !== null ? parameterViolations("CatalogIncludeParam", include.split(",")) : []),
      ...(product !== null ? parameterViolations("GpuProductFilter", product.split(",")) : []),
      ...(query.has("count") ? parameterViolations("GpuCountFilter", /^\d+$/.test(query.get("count")!) ? count : query.get("count")) : []),
      ...(query.has("cloud") ? parameterViolations("GpuCloudFilter", query.get("cloud")) : []),
      ...(query.has("minCudaVersion") ? parameterViolations("MinCudaVersionFilter", query.get("minCudaVersion")) : []),
    ];
    if (broken.length > 0) return [422, { ...problem(422, "Request validation failed."), errors: broken }];
    if (include !== null && product === null) return [400, problem(400, "product is required with include=AVAILABILITY")];
    const cloud = (query.get("cloud") ?? "SECURE") as Cloud;
    const minCuda = query.has("minCudaVersion") ? cudaNumber(query.get("minCudaVersion")!) : undefined;
    const rows = gpuTypes.map((type) => {
      const row = catalogueRow(type, count, cloud, minCuda);
      if (include !== null) return row;
      const { availability: _a, dataCenters: _d, cudaVersions: _c, ...bare } = row;
      return bare;
    });
    return [200, { gpus: rows }, "ListGpuTypesResponse"];
  }

  async function create(body: unknown): Promise<Answer> {
    createHook?.(body);
    const broken = violations("CreatePodRequest", body);
    if (broken.length > 0) return [422, { ...problem(422, "Request validation failed."), errors: broken }];
    const request = body as PodRequest & { cpu?: unknown };
    if ((request.gpu === undefined) === (request.cpu === undefined)) return [400, problem(400, "exactly one of gpu or cpu must be set")];
    const refusal = switches.refuse;
    switches.refuse = undefined;
    if (refusal === 401) return [401, problem(401, "invalid bearer token")];
    if (refusal === 402) return [402, problem(402, "insufficient balance: add funds to deploy this pod")];
    if (refusal === 403) return [403, problem(403, "access denied: this account cannot deploy to the requested pool")];
    const cloud = request.cloud ?? "SECURE";
    const type = gpuTypes.find((t) => t.id === request.gpu.id);
    if (!type) return [400, problem(400, `gpu type '${request.gpu.id}' does not exist`)];
    const count = request.gpu.count ?? 1;
    const max = cloud === "SECURE" ? type.maxCount.secure : type.maxCount.community;
    if (count > max) return [400, problem(400, `at most ${max} GPUs of ${type.id} fit one pod in ${cloud}`)];
    if (refusal === 400 || stockOf(type, cloud, count) === "NONE") return [400, problem(400, NO_CAPACITY)];
    if (switches.failBeforeRenting > 0) {
      switches.failBeforeRenting--;
      return [switches.failBeforeRentingStatus, problem(switches.failBeforeRentingStatus, "upstream error")];
    }
    const pod = pods.add(request, type, switches.surcharge);
    if (switches.createAnswerMs > 0) await sleep(switches.createAnswerMs);
    if (switches.failAfterRenting > 0) {
      switches.failAfterRenting--;
      const status = switches.failAfterRentingStatus;
      return status === "drop" ? [DROPPED, undefined] : [status, problem(status, "upstream error")];
    }
    return [201, pods.view(pod), "Pod"];
  }

  /** The view without `cost`, a field the contract requires. */
  function corrupted(view: Record<string, unknown>): Record<string, unknown> {
    const { cost: _cost, ...rest } = view;
    return rest;
  }

  function list(): Answer {
    const listed = [...pods.all.values()].filter((pod) => Date.now() - pod.createdAt >= switches.listLagMs).map((pod) => pods.view(pod));
    if (switches.corrupt > 0) {
      switches.corrupt--;
      // Sent as is: a RunPod that changed its format is what the adapter must survive.
      return [200, { pods: listed.map(corrupted) }];
    }
    return [200, { pods: listed }, "ListPodsResponse"];
  }

  function show(id: string): Answer {
    const pod = pods.all.get(id);
    if (!pod) return [404, problem(404, "pod not found")];
    if (switches.corrupt > 0) {
      switches.corrupt--;
      return [200, corrupted(pods.view(pod))];
    }
    return [200, pods.view(pod), "Pod"];
  }

  async function remove(id: string): Promise<Answer> {
    if (!pods.all.has(id)) return [404, problem(404, "pod not found")];
    await pods.remove(id);
    return [204, undefined];
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    gpuTypes,
    pods: pods.all,
    breaches,
    setStock(gpuTypeId, cloud, level, upToCount) {
      const type = gpuTypes.find((t) => t.id === gpuTypeId);
      if (!type) throw new Error(`no GPU type ${gpuTypeId}`);
      type.stock[cloud] = level;
      if (upToCount !== undefined) type.stockCount[cloud] = upToCount;
    },
    billAbove: (dollarsPerHour) => void (switches.surcharge = dollarsPerHour),
    refuseNextCreate: (status) => void (switches.refuse = status),
    throttle: (count, retryAfterS) => Object.assign(switches, { throttle: count, retryAfterS }),
    failNext: (count, status) => Object.assign(switches, { fail: count, failStatus: status }),
    failCreatesAfterRenting: (count, status) => Object.assign(switches, { failAfterRenting: count, failAfterRentingStatus: status }),
    failCreatesBeforeRenting: (count, status) => Object.assign(switches, { failBeforeRenting: count, failBeforeRentingStatus: status }),
    delay: (ms) => void (switches.delayMs = ms),
    onCreate: (hook) => void (createHook = hook),
    answerCreatesAfter: (ms) => void (switches.createAnswerMs = ms),
    listLag: (ms) => void (switches.listLagMs = ms),
    corruptNext: (count) => void (switches.corrupt = count),
    setStatus(id, status) {
      if (!CONTRACT_STATES.includes(status)) newerStates.add(status);
      pods.force(id, status);
    },
    addForeignPod: (name) => pods.add({ name, image: "runpod/pytorch:2.4.0", gpu: { id: gpuTypes[0]!.id } }, gpuTypes[0]!).id,
    async close() {
      await pods.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const CONTRACT_STATES = ["PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR", "TERMINATED"];
/** The contract check's word for a pod status outside its enum. */
const NEWER_STATE_MISS = /\.status: must be equal to one of the allowed values$/;

function problem(status: number, detail: string): Record<string, unknown> {
  const titles: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found", 422: "Unprocessable Entity", 429: "Too Many Requests" };
  return { title: titles[status] ?? (status >= 500 ? "Internal Server Error" : "Error"), status, detail };
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (body === undefined) {
    res.writeHead(status, headers).end();
    return;
  }
  const type = status >= 400 ? "application/problem+json" : "application/json";
  res.writeHead(status, { "content-type": type, ...headers }).end(JSON.stringify(body));
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (text += chunk));
    req.on("end", () => resolve(text));
    req.on("error", reject);
  });
}
