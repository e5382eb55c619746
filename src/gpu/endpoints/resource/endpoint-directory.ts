import type { EndpointDirectory, RouteTarget } from "../../../module.js";
import type { GpuContext } from "../../gpu-context.js";
import type { EndpointStore } from "./endpoint-store.js";
import { replicaFactsOf } from "../replicas/replica-facts.js";
import { replicaKey, replicaUrl } from "../replicas/replica-probes.js";
import { isRoutable } from "../replicas/replica-state.js";

// Where the proxy finds an endpoint's ready replicas. Every service process answers from
// PostgreSQL (the controller writes readiness there), leader or not. Answers are kept for
// cacheMs (about a second) so that a busy proxy does not query the database per request; a
// ready replica that fails a probe is out of routing within one probe and that second.

export function createEndpointDirectory(deps: { ctx: Pick<GpuContext, "instances">; endpoints: EndpointStore }, cacheMs = 1000): EndpointDirectory {
  const cache = new Map<string, { at: number; answer: Promise<RouteTarget[] | undefined> }>();

  async function lookUp(name: string): Promise<RouteTarget[] | undefined> {
    const endpoint = await deps.endpoints.getByName(name);
    if (!endpoint || endpoint.phase === "deleted") return undefined;
    if (endpoint.phase === "deleting") return [];
    const targets: RouteTarget[] = [];
    for (const facts of await replicaFactsOf(deps, endpoint)) {
      const url = facts.record && isRoutable(facts) ? replicaUrl(facts.record) : undefined;
      if (facts.record && url !== undefined) targets.push({ instanceId: facts.row.instanceId, url, apiKey: replicaKey(facts.record) });
    }
    return targets;
  }

  return {
    readyReplicas(name) {
      const now = Date.now();
      const cached = cache.get(name);
      if (cached && now - cached.at < cacheMs) return cached.answer;
      const answer = lookUp(name);
      cache.set(name, { at: now, answer });
      // A failed look-up (database away) is not remembered.
      answer.catch(() => cache.get(name)?.answer === answer && cache.delete(name));
      // Names are few; forget the stale ones so that unknown names cannot grow the map.
      if (cache.size > 1000) for (const [key, entry] of cache) if (now - entry.at >= cacheMs) cache.delete(key);
      return answer;
    },
  };
}
