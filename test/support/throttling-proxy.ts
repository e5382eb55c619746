import { createServer, type IncomingMessage, type ServerResponse } from "node:http";

/**
 * An HTTP proxy in front of Elasticsearch that plays an overloaded cluster on the next `n` bulk
 * requests (`throttleNext`). Mode "items": it forwards every other document and answers the others
 * itself with item status 429 (es_rejected_execution_exception), in the request's order, as a node
 * whose write queue is full does. Mode "all-items": every document is answered item status 429,
 * nothing is forwarded. Mode "request": the whole request is answered HTTP 429, as a node
 * rejecting it outright (circuit breaker, coordinating queue) does. Everything else passes
 * through unchanged.
 */
export interface ThrottlingProxy {
  readonly url: string;
  /** Documents answered 429 so far. */
  readonly throttledItems: number;
  /** Bulk requests the proxy answered itself so far, in any mode. */
  readonly throttled: number;
  throttleNext(bulkRequests: number, mode?: ThrottleMode): void;
  close(): Promise<void>;
}

export type ThrottleMode = "items" | "all-items" | "request";

interface BulkItemResult {
  [op: string]: { _id?: string; status: number; error?: unknown };
}

export async function startThrottlingProxy(target: string): Promise<ThrottlingProxy> {
  const state = { toThrottle: 0, throttledItems: 0, throttled: 0, mode: "items" as ThrottleMode };
  const server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      res.writeHead(502, { "content-type": "text/plain" });
      res.end(String(err));
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    if (req.method === "POST" && req.url?.split("?")[0]?.endsWith("/_bulk") && state.toThrottle > 0) {
      state.toThrottle--;
      state.throttled++;
      if (state.mode === "request") return rejectWhole(res, body);
      return throttleItems(req, res, body, state.mode === "items" ? (i) => i % 2 === 1 : () => false);
    }
    const upstream = await forward(req, body === "" ? undefined : body);
    res.writeHead(upstream.status, upstream.headers);
    res.end(upstream.body);
  }

  /** Forwards the documents `passes` picks, by position, and answers the others 429. */
  async function throttleItems(req: IncomingMessage, res: ServerResponse, body: string, passes: (i: number) => boolean): Promise<void> {
    const pairs = operations(body);
    const passed = pairs.filter((_, i) => passes(i));
    let upstreamItems: BulkItemResult[] = [];
    if (passed.length > 0) {
      const upstream = await forward(req, `${passed.flat().join("\n")}\n`);
      upstreamItems = (JSON.parse(upstream.body.toString("utf8")) as { items: BulkItemResult[] }).items;
    }
    let next = 0;
    const items = pairs.map((pair, i) => {
      if (passes(i)) return upstreamItems[next++]!;
      state.throttledItems++;
      const [action, meta] = Object.entries(JSON.parse(pair[0]!) as Record<string, { _id: string }>)[0]!;
      return { [action]: { _id: meta._id, status: 429, error: { type: "es_rejected_execution_exception", reason: "rejected execution: write queue full" } } };
    });
    res.writeHead(200, { "content-type": "application/json", "x-elastic-product": "Elasticsearch" });
    res.end(JSON.stringify({ took: 1, errors: true, items }));
  }

  function rejectWhole(res: ServerResponse, body: string): void {
    state.throttledItems += operations(body).length;
    const reason = "rejected execution of coordinating operation";
    res.writeHead(429, { "content-type": "application/json", "x-elastic-product": "Elasticsearch" });
    res.end(JSON.stringify({ error: { type: "es_rejected_execution_exception", reason, root_cause: [{ type: "es_rejected_execution_exception", reason }] }, status: 429 }));
  }

  async function forward(req: IncomingMessage, body: string | undefined) {
    const skipped = ["host", "content-length", "connection", "accept-encoding"];
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => !skipped.includes(name))) as Record<string, string>;
    const upstream = await fetch(`${target}${req.url}`, { method: req.method, headers, body });
    const responseHeaders = Object.fromEntries([...upstream.headers].filter(([name]) => !["content-encoding", "content-length", "transfer-encoding"].includes(name)));
    return { status: upstream.status, headers: responseHeaders, body: Buffer.from(await upstream.arrayBuffer()) };
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    get throttledItems() {
      return state.throttledItems;
    },
    get throttled() {
      return state.throttled;
    },
    throttleNext(bulkRequests, mode = "items") {
      state.toThrottle = bulkRequests;
      state.mode = mode;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The operations of an NDJSON bulk body: an index has an action and a document line, a delete only its action. */
function operations(body: string): string[][] {
  const lines = body.split("\n").filter((line) => line !== "");
  const result: string[][] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    result.push(line.startsWith('{"delete"') ? [line] : [line, lines[++i]!]);
  }
  return result;
}
