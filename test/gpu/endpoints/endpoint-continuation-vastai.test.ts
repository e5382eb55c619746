import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";
import { captureLogLines } from "../../support/log-lines.js";
import { chunksText, sseChunks, type StreamChunk } from "../../support/sse.js";
import { asTheReplicaGetsIt, comparable, expectedChunks, straightFrom } from "../../support/streamed-answers.js";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { waitFor } from "../helpers.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, waitForEndpoint, type EndpointJson } from "./helpers.js";

// An answer that survives its replica on the real service and vast.ai's wire format (the
// emulator): an interruptible endpoint with two bids, a stream in flight on one of them, that bid
// outbid (its model server dies with it, the connection reset mid-answer); the caller's stream is
// continued on the other bid and equals the answer never cut, character for character.

const { logger, lines } = captureLogLines();
let svc: VastService;

beforeAll(async () => {
  svc = await startVastService(
    { apiKey: "vast-continue-0123456789", provisioningMs: 100, loadingMs: 100 },
    { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "100" },
    logger,
  );
});

afterAll(async () => {
  await svc?.close();
});

const CAPACITY = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 };
const readyBids = (e: EndpointJson) => (e.instances ?? []).filter((i) => i.state === "ready" && (i as { interruptible?: boolean }).interruptible);
const marketIdOf = async (instanceId: string) =>
  Number(((await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string }).market_instance_id);

/** The caller's events as they arrive, each with its time. */
function eventsAsTheyCome(res: Response): { events: Array<{ at: number; data: string }>; whole: Promise<string> } {
  const events: Array<{ at: number; data: string }> = [];
  const whole = (async () => {
    const decoder = new TextDecoder();
    let text = "";
    let pending = "";
    for await (const bytes of res.body as AsyncIterable<Uint8Array>) {
      const chunk = decoder.decode(bytes, { stream: true });
      text += chunk;
      const blocks = (pending + chunk).split("\n\n");
      pending = blocks.pop()!;
      for (const block of blocks) if (block.startsWith("data: ")) events.push({ at: Date.now(), data: block.slice(6) });
    }
    return text;
  })();
  return { events, whole };
}

describe("a streamed answer on an interruptible endpoint whose bid is outbid mid-answer", () => {
  it("is continued on the other bid: the caller reads the answer never cut", async () => {
    const url = svc.server.url;
    await createEndpoint(url, { name: "answers", template_name: "budget", replicas: 2, max_cost_per_hour: 5, capacity: CAPACITY });
    await waitForEndpoint(url, "answers", "two bids ready", (e) => readyBids(e).length === 2, 30_000);

    const body = { messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 60, stream_options: { include_usage: true } };
    const sentAt = Date.now();
    const res = await fetch(`${url}/endpoints/answers/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(res.status).toBe(200);
    const victim = res.headers.get("x-endpoint-instance")!;
    const caller = eventsAsTheyCome(res);
    await waitFor("10 events to the caller", async () => (caller.events.length >= 10 ? true : undefined), 10_000);
    const victimMarketId = await marketIdOf(victim);
    const outbidAt = Date.now();
    svc.vast.outbid(victimMarketId);
    const text = await caller.whole;
    const doneAt = caller.events.at(-1)!.at;
    expect(caller.events.filter((e) => e.data.startsWith('{"error"'))).toEqual([]);

    // The answer never cut: the same request (as the replica gets it, usage on every chunk) to a
    // model server of the same model on a machine of the victim's name.
    const chunks = sseChunks(text);
    const reference = await startModelServer({ model: chunks[0]!.model, host: "127.0.0.1", instance: String(victimMarketId), tokenDelayMs: 0 });
    const uncut = await straightFrom(reference, "/v1/chat/completions", asTheReplicaGetsIt(body)).finally(() => reference.close());
    expect(chunksText(chunks)).toBe(chunksText(sseChunks(uncut)));
    expect(chunksText(chunks)).toMatch(new RegExp(`^Hello from instance ${victimMarketId}, .* №60$`));
    expect(chunks.map(comparable)).toEqual(expectedChunks(uncut, "final"));
    expect(new Set(chunks.map((c: StreamChunk) => c.id)).size).toBe(1);
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);

    // The timeline, from the caller's side and the service's log and events.
    const cutLog = lines.find((l) => l.msg === "replica's streamed answer cut: its connection ended before the answer did" && l.instance_id === victim);
    const continuedLog = lines.find((l) => l.msg === "streamed answer continued on another replica");
    expect(cutLog).toBeDefined();
    expect(continuedLog).toMatchObject({ from: victim, continuation: 1 });
    const firstContinued = caller.events.find((e) => e.at >= (continuedLog!.time as number));
    const preempted = await waitFor("the preempted event", async () => (await eventsOf(url, "answers")).find((e) => e.kind === "preempted" && e.instance_id === victim), 10_000);
    const since = (at: number) => `+${at - outbidAt} ms`;
    console.log(
      [
        `continuation timeline (bid ${victim} outbid at 0, the request sent ${outbidAt - sentAt} ms before, ${caller.events.filter((e) => e.at < outbidAt).length} events read by then): cut seen by the proxy ${since(cutLog!.time as number)} (${cutLog!.tokens} tokens passed on)`,
        `continuation sent to ${String(continuedLog!.to)}, its answer begun ${since(continuedLog!.time as number)}`,
        `first continued token at the caller ${since(firstContinued!.at)}`,
        `[DONE] at the caller ${since(doneAt)}`,
        `preempted event ${since(Date.parse(preempted.at))}`,
      ].join("; "),
    );
    await deleteAndWait(url, "answers");
  }, 90_000);
});
