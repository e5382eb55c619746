import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { EndpointRoute } from "../../../src/module.js";
import { blockHashes } from "../../../src/server/prefix-index/prompt-blocks.js";
import { KeptBytes } from "../../../src/server/proxy/kept-body.js";
import { createProxyMetrics } from "../../../src/server/proxy/proxy-metrics.js";
import { ReplicaBalancer } from "../../../src/server/proxy/replica-balancer.js";
import { ReplicaChoice } from "../../../src/server/proxy/replica-choice.js";

// The replica a request goes to first, and what the index learns from where requests went
// (SPEC.md section 2, "Requests that share a prompt go where it is cached"): on the proxy's own
// parts, without HTTP. Whether a replica holds a prompt shows in how the next request of it is
// routed, on a route of that replica alone: a hit, or a miss.

const target = (id: string) => ({ instanceId: id, url: `http://127.0.0.1:9/${id}`, apiKey: null });
const routeOf = (...ids: string[]): EndpointRoute => ({ endpointId: "e", routing: "prefix", coming: false, targets: ids.map(target) });
const PROMPT = blockHashes("You answer questions about the shop. ".repeat(20));

function makeChoice() {
  const registry = new Registry();
  const made = new ReplicaChoice(new ReplicaBalancer(), createProxyMetrics(registry, new KeptBytes()), { maxBlocks: 1_000, ttlMs: 60_000 });
  /** How a request of PROMPT on a route of `id` alone is routed: whether that replica holds it. */
  const routedOn = async (id: string) => {
    const before = await registry.getSingleMetric("gpu_endpoint_prefix_routed_total")!.get();
    made.first("coder", routeOf(id), PROMPT);
    const after = await registry.getSingleMetric("gpu_endpoint_prefix_routed_total")!.get();
    const count = (values: typeof after.values, outcome: string) => values.find((v) => v.labels.outcome === outcome)?.value ?? 0;
    return count(after.values, "hit") > count(before.values, "hit") ? "hit" : "miss";
  };
  return { choice: made, routedOn };
}

describe("the replica choice", () => {
  it("sends a prompt where it went before, on the same directory answer and on the next", () => {
    const { choice } = makeChoice();
    const route = routeOf("a", "b", "c");
    const first = choice.first("coder", route, PROMPT);
    expect(choice.first("coder", route, PROMPT)).toBe(first);
    expect(choice.first("coder", routeOf("a", "b", "c"), PROMPT).instanceId).toBe(first.instanceId);
  });

  it("teaches the index the replica a request was retried on", async () => {
    const { choice, routedOn } = makeChoice();
    const route = routeOf("a", "b");
    const first = choice.first("coder", route, PROMPT);
    const other = route.targets.find((t) => t !== first)!;
    choice.resent(route, other, PROMPT);
    expect(await routedOn(other.instanceId)).toBe("hit");
  });

  it("teaches it a replica a continuation went to that came into routing after the request's route was read", async () => {
    const { choice, routedOn } = makeChoice();
    const route = routeOf("a");
    choice.first("coder", route, PROMPT);
    choice.resent(route, target("c"), PROMPT);
    // Requests on the earlier route still find the prompt on a.
    expect(choice.first("coder", route, PROMPT).instanceId).toBe("a");
    expect(await routedOn("c")).toBe("hit");
  });

  it("forgets a replica that left routing, so that its return starts empty", async () => {
    const { choice, routedOn } = makeChoice();
    choice.first("coder", routeOf("a"), PROMPT);
    choice.first("coder", routeOf("b"), PROMPT);
    expect(await routedOn("a")).toBe("miss");
  });
});
