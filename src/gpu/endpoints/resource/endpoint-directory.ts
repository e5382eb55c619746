import type { Logger } from "pino";
import type { EndpointDirectory, EndpointRoute, RouteTarget } from "../../../module.js";
import type { GpuContext } from "../../gpu-context.js";
import type { EndpointRecord, EndpointStore } from "./endpoint-store.js";
import { replicaFactsOf } from "../replicas/replica-facts.js";
import { replicaKey, replicaUrl } from "../replicas/replica-probes.js";
import { isRoutable, replicaState, type ReplicaFacts } from "../replicas/replica-state.js";

// Where the proxy finds an endpoint's ready replicas, and whether one is coming (so that a
// request waits for it rather than hearing 503). Every service process answers from PostgreSQL
// (the controller writes readiness there), leader or not. Answers are kept for cacheMs (about a
// second) so that a busy proxy, or one polling for its held requests, does not query the
// database per request; a ready replica that fails a probe is out of routing within one probe
// and that second. While the database cannot be read (a restart, a failover), an endpoint is
// routed from its last answer, up to staleMs old: the replicas are still up and the models
// served; the proxy's retries pass over one that died meanwhile (docs/endpoints.md, "The
// database away").

/** How long each process keeps a directory answer: a replica out of routing may still get requests that long. */
export const DIRECTORY_CACHE_MS = 1000;

/**
 * How long an endpoint is routed from its last answer while the database cannot be read. Bounded:
 * a machine ended meanwhile may have passed its address on to another renter.
 */
export const DIRECTORY_STALE_MS = 120_000;

export interface DirectoryDeps {
  ctx: Pick<GpuContext, "instances">;
  endpoints: EndpointStore;
  /** Says when an endpoint is routed from its last answer, once per outage. */
  logger?: Logger;
}

export function createEndpointDirectory(deps: DirectoryDeps, cacheMs = DIRECTORY_CACHE_MS, staleMs = DIRECTORY_STALE_MS): EndpointDirectory {
  const cache = new Map<string, { at: number; answer: Promise<EndpointRoute | undefined> }>();
  /** Each endpoint's last answer read from the database, and whether it is being served stale now. */
  const lastRead = new Map<string, { at: number; route: EndpointRoute | undefined; stale: boolean }>();

  /** The database's answer, or while it cannot be read, the last one if it is recent enough. */
  async function answerFor(name: string): Promise<EndpointRoute | undefined> {
    let route: EndpointRoute | undefined;
    try {
      route = await lookUp(name);
    } catch (err) {
      const last = lastRead.get(name);
      const age = last === undefined ? Infinity : Date.now() - last.at;
      if (last === undefined || age > staleMs) throw err;
      if (!last.stale) deps.logger?.warn({ err, endpoint: name, age_ms: age }, "endpoint directory unreadable: routing from the endpoint's last known replicas");
      last.stale = true;
      return last.route;
    }
    if (lastRead.get(name)?.stale) deps.logger?.info({ endpoint: name }, "endpoint directory readable again");
    lastRead.set(name, { at: Date.now(), route, stale: false });
    return route;
  }

  async function lookUp(name: string): Promise<EndpointRoute | undefined> {
    const endpoint = await deps.endpoints.getByName(name);
    if (!endpoint || endpoint.phase === "deleted") return undefined;
    if (endpoint.phase === "deleting") return { endpointId: endpoint.id, targets: [], coming: false, refusal: "deleting" };
    const facts = await replicaFactsOf(deps, endpoint);
    const targets: RouteTarget[] = [];
    for (const replica of facts) {
      const url = replica.record && isRoutable(replica) ? replicaUrl(replica.record) : undefined;
      if (replica.record && url !== undefined) targets.push({ instanceId: replica.row.instanceId, url, apiKey: replicaKey(replica.record) });
    }
    return { endpointId: endpoint.id, targets, routing: endpoint.routing, ...comingOf(endpoint, facts) };
  }

  return {
    route(name) {
      const now = Date.now();
      const cached = cache.get(name);
      if (cached && now - cached.at < cacheMs) return cached.answer;
      const answer = answerFor(name);
      cache.set(name, { at: now, answer });
      // A failed look-up (database away, no recent answer) is not remembered.
      answer.catch(() => cache.get(name)?.answer === answer && cache.delete(name));
      // Names are few; forget the old ones so that unknown names cannot grow the maps.
      if (cache.size > 1000) for (const [key, entry] of cache) if (now - entry.at >= cacheMs) cache.delete(key);
      if (lastRead.size > 1000) for (const [key, entry] of lastRead) if (now - entry.at > staleMs) lastRead.delete(key);
      return answer;
    },
  };
}

/**
 * Whether a replica of an active endpoint is coming, so that a request finding none ready waits
 * for it (SPEC.md section 2, Holding): one is on its way (provisioning, starting, or ready but
 * out of routing for a missed probe), or a launch is allowed (its budget does not hold it back)
 * and wanted: a fixed count above 0, or an autoscaled endpoint, which a held request wakes or
 * scales. Otherwise why not: parked (a fixed count of 0: nothing comes) or its budget.
 */
export function comingOf(endpoint: Pick<EndpointRecord, "replicas" | "autoscale" | "budgetHeld">, replicas: readonly ReplicaFacts[]): Pick<EndpointRoute, "coming" | "refusal"> {
  // A parked endpoint's replicas are on their way out, whatever their state.
  if (endpoint.autoscale === null && endpoint.replicas === 0) return { coming: false, refusal: "parked" };
  const onItsWay = replicas.some((r) => {
    const state = replicaState(r);
    return (state === "provisioning" || state === "starting" || state === "unhealthy") && r.row.condemnedAt === null;
  });
  if (onItsWay) return { coming: true };
  if (endpoint.budgetHeld) return { coming: false, refusal: "budget" };
  return { coming: true };
}
