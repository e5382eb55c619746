import type { EndpointRoute, RouteTarget } from "../../module.js";
import { choosePrefix } from "../prefix-index/prefix-choice.js";
import { PrefixIndex, type IndexedReplicas, type PrefixIndexOptions } from "../prefix-index/prefix-index.js";
import type { BlockHashes } from "../prefix-index/prompt-blocks.js";
import { RecentMessages } from "../prefix-index/recent-messages.js";
import type { ProxyMetrics } from "./proxy-metrics.js";
import { targetKey, type ReplicaBalancer } from "./replica-balancer.js";

// The replica a request is sent to first (SPEC.md section 2, "Requests that share a prompt go where
// it is cached"). On an endpoint routed by prefix: the ready replica holding the longest prefix of
// its prompt unless it is too busy (prefix-choice.ts), and the index learns that the prompt went
// there; the replicas no longer in routing are forgotten as the route says so. Otherwise, and for a
// request whose prompt cannot be read: the least outstanding (replica-balancer.ts). Retries and
// continuations, which pass over the replicas that failed, ask the balancer alone, as before; the
// replica a request is retried or continued on learns its prompt too (the index is of the prompts
// sent there: a continuation's begins with its request's).

export class ReplicaChoice {
  private readonly index: PrefixIndex;
  /** The most blocks of a prompt worth hashing: a replica keeps no more. */
  readonly maxBlocks: number;
  /** The messages of recent chat bodies, for reading a prompt's blocks (completion-body.ts): most were read a moment before. */
  readonly recentMessages: RecentMessages;
  /**
   * The index's replicas of a directory answer's targets. The directory keeps an answer about a
   * second, so most requests share it: their blocks found by name once.
   */
  private readonly indexedOf = new WeakMap<readonly RouteTarget[], IndexedReplicas>();

  constructor(
    private readonly balancer: ReplicaBalancer,
    private readonly metrics: ProxyMetrics,
    index: PrefixIndexOptions,
  ) {
    this.index = new PrefixIndex(index);
    this.maxBlocks = index.maxBlocks;
    this.recentMessages = new RecentMessages(index.maxBlocks);
  }

  /** Where a request of endpoint `name` goes first, given its prompt's blocks (completion-body.ts); `route` has at least one ready replica. */
  first(name: string, route: EndpointRoute, blocks: BlockHashes | undefined): RouteTarget {
    const { targets } = route;
    if (route.routing !== "prefix" || blocks === undefined) return this.balancer.pick(targets)!;
    const replicas = this.indexed(route);
    const held = this.index.held(replicas, blocks);
    const choice = choosePrefix(held, this.balancer.loads(targets));
    const chosen = choice.outcome === "hit" ? choice.index : targets.indexOf(this.balancer.pick(targets)!);
    this.index.learn(replicas, chosen, blocks, held[chosen]);
    this.metrics.prefixRouted(name, choice.outcome, blocks.length > 0 ? held[chosen]! / blocks.length : undefined);
    return targets[chosen]!;
  }

  /** A request of `route` whose prompt has `blocks` was sent again, to `target`: a retry before its answer, or its answer's continuation. */
  resent(route: EndpointRoute, target: RouteTarget, blocks: BlockHashes | undefined): void {
    if (route.routing !== "prefix" || blocks === undefined) return;
    const replicas = this.indexed(route);
    const name = targetKey(target);
    const at = replicas.names.indexOf(name);
    if (at >= 0) return this.index.learn(replicas, at, blocks);
    // A continuation on a replica that came into routing after the request's route was read: the
    // index retains it with the route's replicas.
    this.index.learn(this.index.replicas(route.endpointId, [...replicas.names, name]), replicas.names.length, blocks);
  }

  /** The index's replicas of `route`'s targets, found once per directory answer while the index keeps them. */
  private indexed(route: EndpointRoute): IndexedReplicas {
    const known = this.indexedOf.get(route.targets);
    const replicas = this.index.replicas(route.endpointId, known?.names ?? route.targets.map(targetKey), known);
    if (replicas !== known) this.indexedOf.set(route.targets, replicas);
    return replicas;
  }
}
