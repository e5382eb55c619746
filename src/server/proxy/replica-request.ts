import http, { type ClientRequest, type OutgoingHttpHeaders } from "node:http";
import https from "node:https";
import type { ProxyLoad, RouteTarget } from "../../module.js";
import type { ReplicaBalancer } from "./replica-balancer.js";

// One request to one replica, however the proxy sends it (a caller's request, its retry, a
// continuation of a cut answer): on the balancer's keep-alive pool for that replica, with a
// connect timeout, counted in flight for the load and the least-outstanding choice until it closes.

/**
 * A new connection to a replica must be up within this long. A machine gone from the network
 * drops the connection attempt silently, and the system's own limit is about two minutes.
 */
export const CONNECT_TIMEOUT_MS = 5_000;

export interface ReplicaHop {
  balancer: ReplicaBalancer;
  load: ProxyLoad;
  /** Parsed replica URLs, by URL text. */
  addresses: Map<string, Address>;
}

interface Address {
  https: boolean;
  hostname: string;
  port: string;
  basePath: string;
}

export function requestReplica(hop: ReplicaHop, endpointId: string, target: RouteTarget, method: string | undefined, path: string, headers: OutgoingHttpHeaders): ClientRequest {
  const address = addressOf(hop, target.url);
  const attempt = (address.https ? https : http).request({
    agent: hop.balancer.begin(target, address.https),
    hostname: address.hostname,
    port: address.port,
    method,
    path: address.basePath + path,
    headers,
  });
  attempt.once("socket", (socket) => {
    if (!socket.connecting) return;
    const timer = setTimeout(() => attempt.destroy(Object.assign(new Error("connect timed out"), { code: "ETIMEDOUT" })), CONNECT_TIMEOUT_MS);
    socket.once("connect", () => clearTimeout(timer));
    attempt.once("close", () => clearTimeout(timer));
  });
  hop.load.sent(endpointId, target.instanceId, 1);
  attempt.once("close", () => {
    hop.balancer.end(target);
    hop.load.sent(endpointId, target.instanceId, -1);
  });
  return attempt;
}

function addressOf(hop: ReplicaHop, url: string): Address {
  let address = hop.addresses.get(url);
  if (address === undefined) {
    const parsed = new URL(url);
    const secure = parsed.protocol === "https:";
    address = {
      https: secure,
      hostname: parsed.hostname.replace(/^\[(.*)\]$/, "$1"),
      port: parsed.port || (secure ? "443" : "80"),
      basePath: parsed.pathname.replace(/\/+$/, ""),
    };
    // Replicas come and go over weeks; the map is a cache, not a registry.
    if (hop.addresses.size >= 1024) hop.addresses.clear();
    hop.addresses.set(url, address);
  }
  return address;
}
