import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BALANCE_ABSOLUTE } from "../../../src/server/prefix-index/prefix-choice.js";
import { rest, waitFor } from "../../gpu/helpers.js";
import { createEndpoint, eventsOf, startSimulatedService, waitForEndpoint, type EndpointJson, type SimulatedService } from "../../gpu/endpoints/helpers.js";

// Prefix routing on the real service and the simulated marketplace (SPEC.md section 2, "Requests
// that share a prompt go where it is cached"): a conversation's turns go to the replica that
// served its earlier turns, unless that replica is busier than the balance thresholds allow; a
// preempted replica's conversations move elsewhere, no request is lost and none is routed to it
// once it has left routing.

const CAPACITY = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 };

let svc: SimulatedService;

beforeAll(async () => {
  svc = await startSimulatedService({}, { GPU_STATUS_SYNC_MS: "1000" });
});

afterAll(async () => {
  await svc?.close();
});

type Message = { role: string; content: string };

/** A system prompt of several blocks, its own to `topic`. */
const systemPrompt = (topic: string): Message => ({ role: "system", content: `You answer questions about ${topic}. `.repeat(40) });

/** The conversation's next turn: every message before it, then a new question. */
function nextTurn(messages: Message[], turn: number): Message[] {
  messages.push({ role: "user", content: `Question ${turn}: tell me more about part ${turn} of it, please.` });
  return messages;
}

/** Sends one streamed turn and reads it whole: which replica answered, and whether the answer ended with [DONE]. */
async function ask(name: string, messages: Message[], maxTokens = 12): Promise<{ instance: string; whole: boolean; status: number }> {
  const res = await fetch(`${svc.server.url}/endpoints/${name}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages, max_tokens: maxTokens, stream: true }),
  });
  const text = await res.text();
  messages.push({ role: "assistant", content: "ok" });
  return { instance: res.headers.get("x-endpoint-instance") ?? "", whole: res.status === 200 && text.endsWith("data: [DONE]\n\n"), status: res.status };
}

async function metric(series: string): Promise<number> {
  const text = await (await fetch(`${svc.server.url}/metrics`)).text();
  return Number(text.split("\n").find((l) => l.startsWith(`${series} `))?.split(" ").pop() ?? 0);
}

const readyOf = (e: EndpointJson) => (e.instances ?? []).filter((i) => i.state === "ready").map((i) => i.instance_id);
const marketIdOf = async (instanceId: string) =>
  ((await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string }).market_instance_id;

describe("prefix routing", () => {
  it("sends a conversation's turns to one replica; least_outstanding spreads them; a PATCH switches at once", async () => {
    await createEndpoint(svc.server.url, { name: "turns", template_name: "budget", replicas: 3, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "turns", "three ready", (e) => e.ready_replicas === 3, 30_000);

    const conversation = [systemPrompt("ships")];
    const served = new Set<string>();
    for (let turn = 1; turn <= 6; turn++) served.add((await ask("turns", nextTurn(conversation, turn))).instance);
    expect(served.size).toBe(1);
    expect(await metric('gpu_endpoint_prefix_routed_total{endpoint="turns",outcome="hit"}')).toBe(5);
    expect(await metric('gpu_endpoint_prefix_routed_total{endpoint="turns",outcome="miss"}')).toBe(1);
    // Each turn after the first finds the whole of the turn before it: more than half of its prompt.
    expect(await metric('gpu_endpoint_prefix_found_ratio_bucket{le="0.5",endpoint="turns"}')).toBe(1);

    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/turns", { routing: "least_outstanding" })).status).toBe(200);
    // The proxy reads the endpoint again within the directory's second.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const spread = new Set<string>();
    for (let turn = 7; turn <= 12; turn++) spread.add((await ask("turns", nextTurn(conversation, turn))).instance);
    expect(spread.size).toBe(3);
    expect(await metric('gpu_endpoint_prefix_routed_total{endpoint="turns",outcome="hit"}')).toBe(5);
  }, 60_000);

  it(`sends to the least loaded replica once the holder has more than ${BALANCE_ABSOLUTE} answers in flight beyond it`, async () => {
    await createEndpoint(svc.server.url, { name: "busy", template_name: "budget", replicas: 3, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "busy", "three ready", (e) => e.ready_replicas === 3, 30_000);
    const shared = [systemPrompt("trains")];
    const holder = (await ask("busy", nextTurn([...shared], 1))).instance;

    // Long answers with the same prompt, their headers in before the next is sent: all on the holder.
    const streams: AbortController[] = [];
    const openStream = async () => {
      const abort = new AbortController();
      streams.push(abort);
      const res = await fetch(`${svc.server.url}/endpoints/busy/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: nextTurn([...shared], 1), max_tokens: 2000, stream: true }),
        signal: abort.signal,
      });
      // Left unread until the test aborts it: the answer stays in flight.
      expect(res.headers.get("x-endpoint-instance")).toBe(holder);
    };
    try {
      for (let i = 0; i < BALANCE_ABSOLUTE; i++) await openStream();
      // Busier by 4 than the idle replicas: the prefix still wins.
      expect((await ask("busy", nextTurn([...shared], 1), 1)).instance).toBe(holder);
      await openStream();
      // Busier by 5: the least loaded takes it.
      const balanced = await ask("busy", nextTurn([...shared], 1), 1);
      expect(balanced.whole).toBe(true);
      expect(balanced.instance).not.toBe(holder);
      expect(await metric('gpu_endpoint_prefix_routed_total{endpoint="busy",outcome="balanced"}')).toBe(1);
    } finally {
      for (const abort of streams) abort.abort();
    }
  }, 60_000);

  it("loses no request while replicas are preempted, and routes none to a replica gone from routing", async () => {
    await createEndpoint(svc.server.url, { name: "churn", template_name: "budget", replicas: 3, max_cost_per_hour: 5, capacity: CAPACITY });
    await waitForEndpoint(svc.server.url, "churn", "three ready", (e) => e.ready_replicas === 3, 30_000);

    const conversations = Array.from({ length: 6 }, (_, i) => ({ messages: [systemPrompt(`topic ${i}`)], served: [] as string[] }));
    const lost: string[] = [];
    let running = true;
    const loops = conversations.map(async (c) => {
      for (let turn = 1; running; turn++) {
        const answer = await ask("churn", nextTurn(c.messages, turn));
        if (!answer.whole) lost.push(`${answer.status} from ${answer.instance}`);
        c.served.push(answer.instance);
      }
    });

    const preempted: string[] = [];
    let retriesAfterLeaving = 0;
    try {
      for (let round = 0; round < 2; round++) {
        await new Promise((resolve) => setTimeout(resolve, 1500));
        // The replica serving most conversations now.
        const busiest = mostCommon(conversations.map((c) => c.served.at(-1)!));
        await svc.market.preempt(await marketIdOf(busiest));
        preempted.push(busiest);
        await waitFor("out of routing", async () => !readyOf(await waitForEndpoint(svc.server.url, "churn", "read", () => true)).includes(busiest), 10_000);
        // Past the directory's second, no request is sent to it: no retry more.
        await new Promise((resolve) => setTimeout(resolve, 1100));
        const retries = await metric('gpu_endpoint_retries_total{endpoint="churn"}');
        await new Promise((resolve) => setTimeout(resolve, 1500));
        retriesAfterLeaving += (await metric('gpu_endpoint_retries_total{endpoint="churn"}')) - retries;
        await waitForEndpoint(svc.server.url, "churn", "three ready again", (e) => e.ready_replicas === 3, 30_000);
      }
    } finally {
      running = false;
      await Promise.all(loops);
    }

    expect(lost).toEqual([]);
    expect(retriesAfterLeaving).toBe(0);
    expect((await eventsOf(svc.server.url, "churn")).filter((e) => e.kind === "preempted").map((e) => e.instance_id)).toEqual(preempted);
    // A conversation leaves its replica when that replica is gone, or when the balance thresholds
    // send it elsewhere (a preemption's conversations all landing on one replica): never else.
    let movedOffLive = 0;
    for (const c of conversations) {
      for (let i = 1; i < c.served.length; i++) if (c.served[i] !== c.served[i - 1] && !preempted.includes(c.served[i - 1]!)) movedOffLive++;
      expect(c.served.length).toBeGreaterThan(5);
    }
    expect(movedOffLive).toBeLessThanOrEqual(await metric('gpu_endpoint_prefix_routed_total{endpoint="churn",outcome="balanced"}'));
  }, 120_000);
});

function mostCommon(values: string[]): string {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1])[0]![0];
}
