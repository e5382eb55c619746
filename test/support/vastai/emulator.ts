import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { bidTotal, createAsks, dphTotal, storagePerHour, type VastAsk } from "./catalogue.js";
import { createInstances, type EmulatedInstance, type OutbidForm } from "./instances.js";
import { matchesQuery, sortRows, SEARCH_CONTROLS } from "./query.js";

// A vast.ai emulator written from vast.ai's published API reference (docs/marketplace-vastai.md
// lists the documents): the endpoints GpuService calls, their field names and units, Bearer auth,
// the error bodies ({success, error, msg}), the plain-text 429 "API requests too frequent" with no
// Retry-After, the v1 instance list paged by next_token and the deprecated v0 list (410).
// Instances move null -> loading -> running on a clock, and one that maps port 8000 gets a real
// model server on loopback. Switches inject 429s, delays, failures and a per-endpoint rate limit.
// Bids: a search of `type: "bid"` prices offers at their `min_bid`; a create with `price` bids that
// much per hour for the machine, and one below the ask's min_bid is answered `success: false` yet
// names the stopped instance it left (`new_contract`), billing storage; `outbid` stops a bid as
// vast.ai does; PUT /api/v0/instances/bid_price/{id}/ changes a bid.

export interface EmulatorRequest {
  method: string;
  /** The path without query. */
  path: string;
  query: URLSearchParams;
  body: unknown;
  at: number;
  /** The answer's status, once sent. */
  status?: number;
}

export interface EmulatorOptions {
  apiKey: string;
  /** How long actual_status stays null, then "loading", ms. */
  provisioningMs?: number;
  loadingMs?: number;
  /** How long a running machine's model server loads its model before it answers, ms (default 0). */
  modelLoadMs?: number;
  /**
   * Answer 429 when one endpoint is called again within this interval (0: no limit), one for all
   * or per endpoint (search, ask, show, list, destroy). As on vast.ai, a call inside the interval
   * extends the lock-out: the interval runs again from it.
   */
  minIntervalMs?: number | Partial<Record<"search" | "ask" | "show" | "list" | "destroy" | "bid", number>>;
}

export interface VastEmulator {
  readonly url: string;
  readonly requests: EmulatorRequest[];
  readonly asks: VastAsk[];
  readonly instances: Map<number, EmulatedInstance>;
  /** The next `count` requests answer 429: as JSON `{success, error, msg}` naming threshold=0.5 when asked, else plain text. */
  throttle(count: number, json?: boolean): void;
  /** The next `count` requests answer this status without being handled. */
  failNext(count: number, status: number): void;
  /** Every request waits this long before it is handled. */
  delay(ms: number): void;
  /** The next `count` creates rent the machine, then answer this status as an edge would (a 5xx page) or drop the connection. */
  failCreatesAfterRenting(count: number, status: number | "drop"): void;
  /** The next `count` creates rent nothing and answer this status as an edge would (a 5xx page). */
  failCreatesBeforeRenting(count: number, status: number): void;
  /** Creates rent the machine at once but answer only this much later (after the caller's timeout). */
  answerCreatesAfter(ms: number): void;
  /** Runs when a create request arrives, before it is handled (e.g. to kill the caller meanwhile), with its body. */
  onCreate(hook: ((body: unknown) => Promise<void> | void) | undefined): void;
  /** Runs when an offer search arrives, before it is answered (e.g. to hold it as a slow vast.ai would). */
  onSearch(hook: (() => Promise<void> | void) | undefined): void;
  /** The next create rents the machine but its container fails to start (OCI runtime error). */
  failNextStart(): void;
  /**
   * The next create is refused as create_instance.yaml documents: 403 (an ask this account may not
   * rent), 410 (no longer available) or 400 invalid_price (the quote changed since the search).
   */
  refuseNextCreate(why: "not-your-own" | "gone" | "invalid-price"): void;
  /** A machine somebody else created on this account, with their label (on the given ask, or the first rentable). */
  addForeignInstance(label: string, askId?: number): number;
  /** New instances stay unseen (show answers `instances: null`, the list leaves them out) for this long, as vast.ai lags. */
  showLag(ms: number): void;
  /**
   * actual_status of an instance becomes this: "exited" (stopped), "offline", "unknown", "frozen",
   * "rebooting", "running" again; "unloaded" is cur_state "unloaded" with no actual_status.
   */
  setStatus(id: number, actualStatus: string): void;
  /** vast.ai stops a bid instance that lost its machine, showing it in one of two ways (default: actual_status `stopped`). */
  outbid(id: number, form?: OutbidForm): void;
  /** The ask is rentable right now (no instance holds it and the host offers it). */
  isRentable(askId: number): boolean;
  close(): Promise<void>;
}

// vast.ai's two shapes of a 429: plain text, and JSON naming the endpoint's interval in seconds.
const TOO_FREQUENT = "API requests too frequent";
/** A route's "status" for a connection dropped before any answer. */
const DROPPED = -1;
const TOO_FREQUENT_THRESHOLD = "API requests too frequent endpoint threshold=0.5";

export async function startVastEmulator(options: EmulatorOptions): Promise<VastEmulator> {
  const asks = createAsks();
  const instances = createInstances({ provisioningMs: options.provisioningMs ?? 100, loadingMs: options.loadingMs ?? 100, modelLoadMs: options.modelLoadMs ?? 0 });
  const requests: EmulatorRequest[] = [];
  const lastCall = new Map<string, number>();
  const switches = { throttle: 0, throttleJson: false, fail: 0, failStatus: 503, delayMs: 0, failStart: false, showLagMs: 0, createAnswerMs: 0, failAfterRenting: 0, failAfterRentingStatus: 500 as number | "drop", failBeforeRenting: 0, failBeforeRentingStatus: 500, refuseCreate: undefined as undefined | "not-your-own" | "gone" | "invalid-price" };
  const intervalOf = (endpoint: string) =>
    typeof options.minIntervalMs === "object" ? (options.minIntervalMs as Record<string, number | undefined>)[endpoint] ?? 0 : (options.minIntervalMs ?? 0);
  const shown = (i: EmulatedInstance) => Date.now() - i.createdAt >= switches.showLagMs;
  let createHook: ((body: unknown) => Promise<void> | void) | undefined;
  let searchHook: (() => Promise<void> | void) | undefined;

  const isRentable = (ask: VastAsk) => ask.rentable && ![...instances.all.values()].some((i) => i.askId === ask.id);
  const offerView = (ask: VastAsk, storageGb: number, bid: boolean) => ({
    ...ask,
    ask_contract_id: ask.id,
    // The bid market prices an offer at its minimum bid (search_offers.yaml: "Uses minimum bid price").
    dph_total: bid ? bidTotal(ask, ask.min_bid, storageGb) : dphTotal(ask, storageGb),
    storage_total_cost: storagePerHour(ask, storageGb),
    is_bid: false,
    rentable: isRentable(ask),
    rented: false,
    verification: ask.verified ? "verified" : "unverified",
  });

  const server = createServer((req, res) => {
    void serve(req, res).catch((err: unknown) => send(res, 500, error("internal", String(err))));
  });

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://vast");
    const method = req.method ?? "";
    const raw = await readBody(req);
    let body: unknown;
    try {
      body = raw === "" ? undefined : JSON.parse(raw);
    } catch {
      return send(res, 400, error("invalid_args", `error 400/1782: Invalid args: invalid json: ${raw.slice(0, 40)}`));
    }
    const entry: EmulatorRequest = { method, path: url.pathname, query: url.searchParams, body, at: Date.now() };
    requests.push(entry);
    res.on("finish", () => (entry.status = res.statusCode));
    if (switches.delayMs > 0) await sleep(switches.delayMs);
    if (req.headers.authorization !== `Bearer ${options.apiKey}`) {
      // As vast.ai documents it: the offer search answers an unknown key with 404, the other endpoints with 401.
      if (method === "POST" && url.pathname === "/api/v0/bundles/") return send(res, 404, error("auth_error", "Invalid user key"));
      return send(res, 401, error("auth_error", "Invalid user key"));
    }
    if (switches.throttle > 0) {
      switches.throttle--;
      return switches.throttleJson ? send(res, 429, error("rate_limit_exceeded", TOO_FREQUENT_THRESHOLD)) : sendText(res, 429, TOO_FREQUENT);
    }
    if (switches.fail > 0) {
      switches.fail--;
      return sendText(res, switches.failStatus, "<html><body>upstream unavailable</body></html>");
    }
    const route = routeOf(method, url.pathname);
    if (!route) return send(res, 404, { detail: "Not Found" });
    const interval = intervalOf(route.endpoint);
    if (interval > 0) {
      const last = lastCall.get(route.endpoint);
      lastCall.set(route.endpoint, Date.now());
      if (last !== undefined && Date.now() - last < interval) {
        // As create_instance.yaml shows it; the plain-text shape comes from throttle().
        return send(res, 429, { detail: `API requests too frequent endpoint threshold=${interval / 1000}` });
      }
    }
    const [status, answer] = await route.handle(body, url.searchParams);
    if (status === DROPPED) return void req.socket.destroy();
    if (typeof answer === "string") return sendText(res, status, answer);
    send(res, status, answer);
  }

  type Handler = (body: unknown, query: URLSearchParams) => Promise<[number, unknown]> | [number, unknown];

  function routeOf(method: string, path: string): { endpoint: string; handle: Handler } | undefined {
    const id = (pattern: RegExp) => Number(pattern.exec(path)?.[1]);
    if (method === "POST" && path === "/api/v0/bundles/") return { endpoint: "search", handle: async (body) => (await searchHook?.(), search(body)) };
    if (method === "PUT" && /^\/api\/v0\/asks\/\d+\/$/.test(path)) {
      return { endpoint: "ask", handle: (body) => create(id(/asks\/(\d+)/), body) };
    }
    if (method === "GET" && path === "/api/v1/instances/") return { endpoint: "list", handle: (_b, query) => list(query) };
    if (method === "GET" && path === "/api/v0/instances/") {
      return { endpoint: "list-v0", handle: () => [410, error("deprecated", "This endpoint is deprecated; use /api/v1/instances/")] };
    }
    if (method === "PUT" && /^\/api\/v0\/instances\/bid_price\/\d+\/$/.test(path)) {
      return { endpoint: "bid", handle: (body) => changeBid(id(/bid_price\/(\d+)/), body) };
    }
    const one = /^\/api\/v0\/instances\/(\d+)\/$/;
    if (method === "GET" && one.test(path)) return { endpoint: "show", handle: () => show(id(one)) };
    if (method === "DELETE" && one.test(path)) return { endpoint: "destroy", handle: () => destroy(id(one)) };
    return undefined;
  }

  function search(body: unknown): [number, unknown] {
    if (!isObject(body)) return [400, error("invalid_args", "error 400/1782: Invalid args: invalid json: {}")];
    const storage = body.allocated_storage ?? 8;
    if (typeof storage !== "number" || storage <= 0) return [400, error("invalid_args", "allocated_storage must be a positive number")];
    const type = body.type ?? "on-demand";
    if (type !== "on-demand" && type !== "bid" && type !== "reserved") return [400, error("invalid_args", `unknown offer type '${String(type)}'`)];
    const filters = { verified: { eq: true }, rentable: { eq: true }, rented: { eq: false }, ...body };
    const rows = asks.map((ask) => offerView(ask, storage, type === "bid"));
    const matched = matchesQuery(rows, filters, SEARCH_CONTROLS);
    if (typeof matched === "string") return [400, error("invalid_args", matched)];
    const order = Array.isArray(body.order) ? body.order : [["score", "desc"]];
    const sorted = sortRows(matched, order.map((o: unknown) => (Array.isArray(o) ? { col: o[0], dir: o[1] } : {})));
    const limit = typeof body.limit === "number" ? body.limit : 64;
    return [200, { offers: sorted.slice(0, limit) }];
  }

  async function create(askId: number, body: unknown): Promise<[number, unknown]> {
    await createHook?.(body);
    const invalid = createBodyProblem(body);
    if (invalid) return [400, { ...error("invalid_args", `error 400/3467: Invalid args: ${invalid}`), ask_id: askId }];
    const ask = asks.find((a) => a.id === askId);
    if (!ask) return [404, { ...error("invalid_args", `error 404/3603: no_such_ask Instance type by id ${askId} is not available.`), ask_id: askId }];
    // vast.ai answers an ask rented meanwhile exactly as one that never existed.
    if (!isRentable(ask)) {
      return [404, { ...error("no_such_ask", `error 404/3603: no_such_ask Instance type by id ${askId} is not available.`), ask_id: askId }];
    }
    const refusal = switches.refuseCreate;
    switches.refuseCreate = undefined;
    if (refusal === "not-your-own") return [403, { ...error("invalid_args", `error 403/3586: Offer ${askId} is not your own. Hosts can only rent their own machines.`), ask_id: askId }];
    if (refusal === "gone") return [410, { ...error("no_such_ask", `error 410/3907: no_such_ask Instance type ${askId} is no longer available.`), ask_id: askId }];
    // invalid_price is documented by its code only; the message is the emulator's.
    if (refusal === "invalid-price") return [400, { ...error("invalid_price", `error 400/3912: the price of offer ${askId} changed; search again`), ask_id: askId }];
    if (switches.failBeforeRenting > 0) {
      switches.failBeforeRenting--;
      return [switches.failBeforeRentingStatus, `<html><body>error code: ${switches.failBeforeRentingStatus}</body></html>`];
    }
    const request = body as Record<string, unknown>;
    const instance = await instances.rent(ask, request, switches.failStart);
    switches.failStart = false;
    if (switches.createAnswerMs > 0) await sleep(switches.createAnswerMs);
    if (switches.failAfterRenting > 0) {
      switches.failAfterRenting--;
      const status = switches.failAfterRentingStatus;
      return status === "drop" ? [DROPPED, undefined] : [status, `<html><body>error code: ${status}</body></html>`];
    }
    if (instance.outbidAs !== undefined) {
      // Documented only as "a stopped instance" a failed scheduling leaves; code and message are the emulator's.
      const msg = `error 400/3915: bid ${String(request.price)} is below the minimum bid ${ask.min_bid} of offer ${askId}`;
      return [200, { ...error("bid_too_low", msg), new_contract: instance.id }];
    }
    return [200, { success: true, new_contract: instance.id, instance_api_key: `ik-${instance.id}` }];
  }

  /** change_bid.yaml: price 0.001..32 per GPU; 404 no_such_instance. */
  function changeBid(id: number, body: unknown): [number, unknown] {
    const instance = instances.all.get(id);
    if (!instance) return [404, error("no_such_instance", "Instance with that ID does not exist.")];
    const price = isObject(body) ? body.price : undefined;
    if (!isObject(body) || body.client_id !== "me" || typeof price !== "number" || price < 0.001 || price > 32 * instance.ask.num_gpus) {
      return [400, error("invalid_args", "Please set a bid price >= 0.001.")];
    }
    if (instance.bid === undefined) return [400, error("invalid_args", `Instance ${id} is not an interruptible instance.`)];
    instances.changeBid(instance, price);
    return [200, { success: true }];
  }

  function list(query: URLSearchParams): [number, unknown] {
    const limit = Math.min(25, Number(query.get("limit") ?? 25) > 0 ? Number(query.get("limit") ?? 25) : 5);
    let after = 0;
    const token = query.get("after_token");
    if (token) {
      const decoded = decodeToken(token);
      if (decoded === undefined) return [400, error("invalid_args", "invalid after_token")];
      after = decoded;
    }
    const filters = parseJsonParam(query.get("select_filters")) ?? {};
    const rows = [...instances.all.values()].filter(shown).map((i) => instances.row(i));
    const matched = matchesQuery(rows, filters, new Set());
    if (typeof matched === "string") return [400, error("invalid_args", matched)];
    const all = matched.sort((a, b) => Number(a.id) - Number(b.id));
    const page = all.filter((r) => Number(r.id) > after).slice(0, limit);
    const more = all.some((r) => Number(r.id) > Number(page.at(-1)?.id ?? Infinity));
    const labelCounts: Record<string, number> = {};
    for (const r of all) labelCounts[String(r.label ?? "")] = (labelCounts[String(r.label ?? "")] ?? 0) + 1;
    return [
      200,
      {
        success: true,
        instances_found: page.length,
        total_instances: all.length,
        label_counts: labelCounts,
        next_token: more ? Buffer.from(JSON.stringify({ values: { id: page.at(-1)!.id } })).toString("base64") : null,
        instances: page,
      },
    ];
  }

  function show(id: number): [number, unknown] {
    const instance = instances.all.get(id);
    return [200, { instances: instance && shown(instance) ? instances.row(instance) : null }];
  }

  async function destroy(id: number): Promise<[number, unknown]> {
    if (!instances.all.has(id)) return [404, error("not_found", "Instance not found")];
    await instances.remove(id);
    return [200, { success: true, msg: "Instance destroyed successfully" }];
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    asks,
    instances: instances.all,
    throttle: (count, json = false) => Object.assign(switches, { throttle: count, throttleJson: json }),
    failNext: (count, status) => Object.assign(switches, { fail: count, failStatus: status }),
    delay: (ms) => void (switches.delayMs = ms),
    failCreatesAfterRenting: (count, status) => Object.assign(switches, { failAfterRenting: count, failAfterRentingStatus: status }),
    failCreatesBeforeRenting: (count, status) => Object.assign(switches, { failBeforeRenting: count, failBeforeRentingStatus: status }),
    answerCreatesAfter: (ms) => void (switches.createAnswerMs = ms),
    onCreate: (hook) => void (createHook = hook),
    onSearch: (hook) => void (searchHook = hook),
    failNextStart: () => void (switches.failStart = true),
    refuseNextCreate: (why) => void (switches.refuseCreate = why),
    addForeignInstance: (label, askId) => instances.foreign(asks.find((a) => (askId === undefined ? isRentable(a) : a.id === askId))!, label).id,
    showLag: (ms) => void (switches.showLagMs = ms),
    setStatus: (id, actualStatus) => instances.setStatus(id, actualStatus),
    outbid: (id, form = "actual_status") => instances.outbid(id, form),
    isRentable: (askId) => isRentable(asks.find((a) => a.id === askId)!),
    async close() {
      await instances.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** What vast.ai's documented input validation of a create refuses, or undefined. */
function createBodyProblem(body: unknown): string | undefined {
  if (!isObject(body)) return "invalid json";
  if (typeof body.image !== "string" || body.image === "" || body.image.length > 1024) return "'image' must be a docker image name";
  if (body.disk !== undefined && !(typeof body.disk === "number" && body.disk >= 8)) return "'disk' must be at least 8 GB";
  if (body.label !== undefined && body.label !== null && !(typeof body.label === "string" && body.label.length <= 256)) return "'label' is too long";
  if (body.env !== undefined && !isObject(body.env) && typeof body.env !== "string") return "'env' must be an object or a string";
  if (body.args !== undefined && !(Array.isArray(body.args) && body.args.every((a) => typeof a === "string"))) return "'args' must be a list of strings";
  // create_instance.yaml: a bid price per machine, 0.001 to 128 $/h.
  if (body.price !== undefined && body.price !== null && !(typeof body.price === "number" && body.price >= 0.001 && body.price <= 128)) return "'price' must be from 0.001 to 128";
  return undefined;
}

function decodeToken(token: string): number | undefined {
  try {
    const id = (JSON.parse(Buffer.from(token, "base64").toString()) as { values?: { id?: unknown } }).values?.id;
    return typeof id === "number" ? id : undefined;
  } catch {
    return undefined;
  }
}

function parseJsonParam(value: string | null): Record<string, unknown> | undefined {
  if (value === null) return undefined;
  try {
    const parsed: unknown = JSON.parse(value);
    return isObject(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function error(code: string, msg: string) {
  return { success: false, error: code, msg };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "text/plain" }).end(text);
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
