// The floors under the endpoint proxy (bench:proxy): the least a Node process can do to pass a
// request on, on the same node:http server the service listens with, with each HTTP client the
// proxy could use for its hop to the replica. No auth, no routing, no metrics, no continuation:
// the caller's request goes to the one replica (hop-by-hop headers dropped, the replica's key in
// place of the caller's Authorization, as the proxy does) and its answer comes back as it arrives. What the
// product's proxy spends above the floor of its client is its own work; what the floor spends
// above nginx is Node's.
import http from "node:http";
import { Pool } from "undici";
// The product's list of the headers that stay on the replica's hop, the one thing taken from it.
import { HOP_BY_HOP } from "../../../src/server/proxy/forward-headers.js";

export type Floor = "node-http" | "undici";

/** A floor proxy in front of the replica on `replicaPort`; resolves with its port. */
export async function startFloorProxy(floor: Floor, replicaPort: number): Promise<number> {
  const handler = floor === "node-http" ? nodeHttpHop(replicaPort) : undiciHop(replicaPort);
  const server = http.createServer({ keepAliveTimeout: 60_000 }, handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as { port: number }).port;
}

/** node:http's client on a keep-alive agent, the body and the answer piped. */
function nodeHttpHop(replicaPort: number): http.RequestListener {
  const agent = new http.Agent({ keepAlive: true, scheduling: "lifo" });
  return (req, res) => {
    const headers = hopHeaders(req.headers);
    const hop = http.request({ agent, hostname: "127.0.0.1", port: replicaPort, method: req.method, path: upstreamPath(req.url), headers }, (answer) => {
      const out: http.OutgoingHttpHeaders = {};
      for (const name in answer.headers) if (!HOP_BY_HOP.has(name)) out[name] = answer.headers[name];
      res.writeHead(answer.statusCode ?? 502, out);
      answer.pipe(res);
    });
    hop.on("error", () => res.destroy());
    req.pipe(hop);
  };
}

/** undici's pool (one per replica), its dispatch handler writing each chunk as it comes. */
function undiciHop(replicaPort: number): http.RequestListener {
  const pool = new Pool(`http://127.0.0.1:${replicaPort}`, { connections: 256 });
  return (req, res) => {
    const headers = hopHeaders(req.headers);
    pool.dispatch(
      { method: req.method as "POST", path: upstreamPath(req.url), headers, body: req },
      {
        onConnect: () => undefined,
        onHeaders(status, raw, resume) {
          const out: string[] = [];
          for (let i = 0; i < raw.length; i += 2) {
            const name = raw[i]!.toString("latin1");
            if (!HOP_BY_HOP.has(name.toLowerCase())) out.push(name, raw[i + 1]!.toString("latin1"));
          }
          res.writeHead(status, out);
          res.on("drain", resume);
          return true;
        },
        onData: (chunk) => res.write(chunk),
        onComplete: () => res.end(),
        onError: () => res.destroy(),
      },
    );
  };
}

/** A replica's key, as the proxy sends a replica's `RouteTarget.apiKey`. */
const REPLICA_KEY = "Bearer replica-key";

/** The caller's headers without hop-by-hop ones, Host or its Authorization, and the replica's key. */
function hopHeaders(incoming: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in incoming) {
    if (HOP_BY_HOP.has(name) || name === "host" || name === "authorization") continue;
    out[name] = String(incoming[name]);
  }
  out.authorization = REPLICA_KEY;
  return out;
}

function upstreamPath(url: string | undefined): string {
  return (url ?? "/").replace(/^\/endpoints\/[^/]+/, "");
}
