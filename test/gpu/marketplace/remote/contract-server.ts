import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { ConflictError, NotFoundError } from "../../../../src/errors.js";
import type { MarketInstance, MarketOffer } from "../../../../src/gpu/marketplace/port.js";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../../src/gpu/marketplace/simulated/simulated.js";

// A marketplace that speaks docs/marketplace-api.md, written from that document (its own
// snake_case JSON, not the adapter's mapping), over the simulated marketplace as its backend.
// Switches make it misbehave the way real ones do: rate limits, outages, hangs, lost answers.

export interface RecordedRequest {
  method: string;
  path: string;
  idempotencyKey: string | undefined;
  at: number;
}

export interface ContractServer {
  readonly url: string;
  readonly backend: SimulatedMarketplace;
  readonly requests: RecordedRequest[];
  /** The next `count` requests answer 429, with this Retry-After header when given. */
  throttle(count: number, retryAfter?: string): void;
  /** The next `count` requests answer this status (5xx) without being handled. */
  failNext(count: number, status: number): void;
  /** The next `count` requests are never answered. */
  hang(count: number): void;
  /** The next `count` requests are handled, but their answer is lost (replaced by a 502). */
  loseAnswers(count: number): void;
  close(): Promise<void>;
}

type Answer = { status: number; body: unknown; headers?: Record<string, string> };

const FAST_CLOCK = { creatingMs: 50, loadingMs: 50, modelServerStartMs: 50 };

export async function startContractServer(options: { apiKey: string }): Promise<ContractServer> {
  const backend = createSimulatedMarketplace(FAST_CLOCK);
  const requests: RecordedRequest[] = [];
  const keys = new Map<string, { offerId: string; instanceId: string }>();
  const switches = { throttle: 0, retryAfter: undefined as string | undefined, fail: 0, failStatus: 503, hang: 0, lose: 0 };

  const server = createServer((req, res) => {
    void serve(req, res).catch(() => send(res, { status: 500, body: error("internal", "contract server failed") }));
  });

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://contract");
    const idempotencyKey = header(req, "idempotency-key");
    requests.push({ method: req.method ?? "", path: url.pathname + url.search, idempotencyKey, at: Date.now() });
    const raw = await readBody(req);
    if (switches.hang > 0) return void switches.hang--;
    if (switches.throttle > 0) {
      switches.throttle--;
      const headers: Record<string, string> = switches.retryAfter ? { "retry-after": switches.retryAfter } : {};
      return send(res, { status: 429, body: error("rate_limited", "too many requests"), headers });
    }
    if (switches.fail > 0) {
      switches.fail--;
      return send(res, { status: switches.failStatus, body: error("unavailable", "try again") });
    }
    if (header(req, "authorization") !== `Bearer ${options.apiKey}`) {
      return send(res, { status: 401, body: error("unauthorized", "missing or unknown API key") });
    }
    const answer = await route(req.method ?? "", url, raw, idempotencyKey);
    if (switches.lose > 0) {
      switches.lose--;
      return send(res, { status: 502, body: error("bad_gateway", "answer lost") });
    }
    send(res, answer);
  }

  async function route(method: string, url: URL, raw: string, key: string | undefined): Promise<Answer> {
    const instanceId = /^\/v1\/instances\/([^/]+)$/.exec(url.pathname)?.[1];
    if (method === "GET" && url.pathname === "/v1/offers") {
      return { status: 200, body: { offers: (await backend.listOffers()).map(offerJson) } };
    }
    if (method === "GET" && url.pathname === "/v1/instances") {
      const prefix = url.searchParams.get("label_prefix") ?? "";
      return { status: 200, body: { instances: (await backend.listInstances(prefix)).map(instanceJson) } };
    }
    if (method === "POST" && url.pathname === "/v1/instances") return create(raw, key);
    if (instanceId !== undefined) {
      const id = decodeURIComponent(instanceId);
      const instance = await backend.getInstance(id);
      if (!instance) return { status: 404, body: error("instance_not_found", `no instance ${id}`) };
      if (method === "GET") return { status: 200, body: { instance: instanceJson(instance) } };
      if (method === "DELETE") {
        await backend.destroyInstance(id);
        return { status: 200, body: { id, status: "destroyed" } };
      }
    }
    return { status: 404, body: error("not_found", `no route ${method} ${url.pathname}`) };
  }

  async function create(raw: string, key: string | undefined): Promise<Answer> {
    const body = parseCreateBody(raw);
    if (typeof body === "string") return { status: 400, body: error("invalid_request", body) };
    if (key === undefined || key.length < 1 || key.length > 200) {
      return { status: 400, body: error("invalid_request", "Idempotency-Key header is required") };
    }
    const previous = keys.get(key);
    if (previous) {
      const instance = await backend.getInstance(previous.instanceId);
      if (previous.offerId !== body.offer_id || !instance) {
        return { status: 409, body: error("idempotency_key_reused", `key ${key} was used for another create`) };
      }
      return { status: 200, body: { instance: instanceJson(instance) }, headers: { "idempotent-replayed": "true" } };
    }
    try {
      const instance = await backend.createInstance({
        offerId: body.offer_id,
        label: body.label,
        image: body.image,
        startCommand: body.start_command,
        env: body.env,
        llmPort: body.llm_port,
        llmModelName: body.llm_model_name,
      });
      keys.set(key, { offerId: body.offer_id, instanceId: instance.id });
      return { status: 201, body: { instance: instanceJson(instance) } };
    } catch (err) {
      if (err instanceof NotFoundError) return { status: 404, body: error("offer_not_found", err.message) };
      if (err instanceof ConflictError) return { status: 409, body: error("offer_not_rentable", err.message) };
      throw err;
    }
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    backend,
    requests,
    throttle(count, retryAfter) {
      switches.throttle = count;
      switches.retryAfter = retryAfter;
    },
    failNext(count, status) {
      switches.fail = count;
      switches.failStatus = status;
    },
    hang(count) {
      switches.hang = count;
    },
    loseAnswers(count) {
      switches.lose = count;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await backend.close();
    },
  };
}

interface CreateBody {
  offer_id: string;
  label: string;
  image: string;
  start_command: string;
  env: Record<string, string>;
  llm_port?: number;
  llm_model_name?: string;
}

/** The body, or what is wrong with it. */
function parseCreateBody(raw: string): CreateBody | string {
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    return "body is not JSON";
  }
  if (typeof body !== "object" || body === null) return "body must be an object";
  const b = body as Record<string, unknown>;
  for (const field of ["offer_id", "label", "image", "start_command"]) {
    if (typeof b[field] !== "string") return `${field} must be a string`;
  }
  const env = b.env;
  if (typeof env !== "object" || env === null || Object.values(env).some((v) => typeof v !== "string")) {
    return "env must be an object of strings";
  }
  if (b.llm_port !== undefined && !Number.isInteger(b.llm_port)) return "llm_port must be an integer";
  if (b.llm_model_name !== undefined && typeof b.llm_model_name !== "string") return "llm_model_name must be a string";
  if ((b.llm_port === undefined) !== (b.llm_model_name === undefined)) return "llm_port and llm_model_name go together";
  return b as unknown as CreateBody;
}

function offerJson(o: MarketOffer) {
  return {
    id: o.id,
    gpu_name: o.gpuName,
    num_gpus: o.numGpus,
    gpu_ram: o.gpuRam,
    dph_total: o.dphTotal,
    rentable: o.rentable,
    location: o.location,
    direct_port_count: o.directPortCount,
    cuda_max_good: o.cudaMaxGood,
    reliability: o.reliability,
  };
}

function instanceJson(i: MarketInstance) {
  return {
    id: i.id,
    offer_id: i.offerId,
    label: i.label,
    status: i.status,
    public_ip: i.publicIp,
    ssh_port: i.sshPort,
    port_mappings: i.portMappings,
    gpu_name: i.gpuName,
    num_gpus: i.numGpus,
    gpu_ram: i.gpuRam,
    dph_total: i.dphTotal,
  };
}

function error(code: string, message: string) {
  return { error: { code, message } };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function send(res: ServerResponse, answer: Answer): void {
  res.writeHead(answer.status, { "content-type": "application/json", ...answer.headers });
  res.end(JSON.stringify(answer.body));
}
