import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findTemplate } from "../../../src/gpu/creation/templates.js";
import { createEndpoint, eventsOf } from "../../gpu/endpoints/helpers.js";
import { elasticsearchUrl } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { spawnService, type ServiceProcess } from "../../support/spawn-service.js";

// The official OpenAI SDK streaming through an endpoint whose bid replicas are preempted every few
// seconds: the service as a process on the simulated marketplace (its own clocks shortened so that a
// minute holds several preemptions). A request whose replica dies before its first byte is
// sent to another, or waits for the one coming: no caller sees a 502 before its answer starts.

const STREAMS = 4;
const RUN_MS = 40_000;

let db: TestDatabase;
let service: ServiceProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await service?.stop("SIGKILL");
  await db?.drop();
});

interface Tally {
  whole: number;
  /** Ended by the proxy's error event mid-answer (its continuations used up, say): raised by the SDK. */
  endedWithError: number;
  /** Failed before the answer started: what this test says never happens. */
  beforeFirstByte: string[];
}

async function streamFor(client: OpenAI, model: string, until: number, tally: Tally): Promise<void> {
  while (Date.now() < until) {
    let stream: AsyncIterable<OpenAI.ChatCompletionChunk>;
    try {
      stream = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 24, stream: true });
    } catch (err) {
      tally.beforeFirstByte.push(String(err));
      continue;
    }
    try {
      for await (const chunk of stream) void chunk;
      tally.whole += 1;
    } catch {
      tally.endedWithError += 1;
    }
  }
}

describe("the OpenAI SDK through frequent preemptions", () => {
  it(`streams ${STREAMS} at a time over three bid replicas preempted every few seconds: no 502 before the first byte`, async () => {
    service = await spawnService({
      DATABASE_URL: db.url,
      ELASTICSEARCH_URL: elasticsearchUrl(),
      INDEX_LIVE: "false",
      SIM_PREEMPT_PER_HOUR: "450",
      SIM_CREATING_MS: "500",
      SIM_LOADING_MS: "500",
      SIM_MODEL_SERVER_START_MS: "500",
      // Replicas routed after one probe, every 5 s: a preempted machine stays routed until the
      // next, and its callers meet it.
      GPU_ENDPOINT_PROBE_MS: "5000",
      GPU_ENDPOINT_READY_AFTER: "1",
      GPU_STATUS_SYNC_MS: "2000",
    });
    const capacity = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 };
    await createEndpoint(service.url, { name: "churn", template_name: "budget", replicas: 3, max_cost_per_hour: 5, capacity });
    // Streams from the start: until a replica is ready (and whenever none is) requests are held.
    const model = findTemplate("budget")!.config!.llmModelName;

    const client = new OpenAI({ baseURL: `${service.url}/endpoints/churn/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
    const tally: Tally = { whole: 0, endedWithError: 0, beforeFirstByte: [] };
    const until = Date.now() + RUN_MS;
    await Promise.all(Array.from({ length: STREAMS }, () => streamFor(client, model, until, tally)));

    const preempted = (await eventsOf(service.url, "churn")).filter((e) => e.kind === "preempted").length;
    const metrics = await (await fetch(`${service.url}/metrics`)).text();
    const count = (series: string) => Number(metrics.split("\n").find((l) => l.startsWith(`${series} `))?.split(" ").pop() ?? 0);
    const retried = count('gpu_endpoint_retries_total{endpoint="churn"}');
    const held = count('gpu_endpoint_hold_seconds_count{endpoint="churn"}');
    const figures = `${preempted} preemptions in ${RUN_MS / 1000} s; ${tally.whole} answers whole, ${tally.endedWithError} ended with the proxy's error; ${retried} retries before a first byte, ${held} stays in the hold queue`;
    console.log(figures);
    expect(tally.beforeFirstByte, figures).toEqual([]);
    expect(preempted, figures).toBeGreaterThanOrEqual(2);
    expect(tally.whole, figures).toBeGreaterThan(0);
  }, 180_000);
});
