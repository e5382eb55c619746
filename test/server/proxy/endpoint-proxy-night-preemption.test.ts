import { Agent, request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findTemplate } from "../../../src/gpu/creation/templates.js";
import { createEndpoint, deleteAndWait, startSimulatedService, waitForEndpoint, type SimulatedService } from "../../gpu/endpoints/helpers.js";

// The night of bench:serve's two-market day, on the real service and the simulated market: an
// endpoint of one interruptible replica loses it to a preemption while callers stream through it.
// A caller gets an answer or a status, never a reset: a request streaming when the machine goes
// (continued on the replacement), one sent to the dead replica while the directory still lists it,
// and one sent while the replacement is cold are held through the cold start and answered whole,
// on the keep-alive connections of a caller that sent before.

let svc: SimulatedService;

beforeAll(async () => {
  // A cold start of about 1.5 s, tokens 50 ms apart.
  svc = await startSimulatedService({ creatingMs: 300, loadingMs: 800, modelServerStartMs: 400, tokenDelayMs: 50 }, { GPU_ENDPOINT_HOLD_MS: "15000" });
});

afterAll(async () => {
  await svc?.close();
});

interface Outcome {
  status?: number;
  error?: string;
  done: boolean;
}

/** One streamed completion through the proxy on a keep-alive agent, as bench:serve's callers send it. */
function stream(agent: Agent, name: string): Promise<Outcome> {
  const body = JSON.stringify({ model: findTemplate("budget")!.config!.llmModelName, messages: [{ role: "user", content: "hi" }], max_tokens: 10, stream: true });
  return new Promise((resolve) => {
    const req = request(
      { agent, host: "127.0.0.1", port: svc.server.port, path: `/endpoints/${name}/v1/chat/completions`, method: "POST", headers: { "content-type": "application/json" } },
      (res) => {
        let text = "";
        res.on("data", (chunk: Buffer) => (text += chunk.toString()));
        res.once("end", () => resolve({ status: res.statusCode, done: text.includes("data: [DONE]") }));
        res.once("error", (err: NodeJS.ErrnoException) => resolve({ status: res.statusCode, error: err.code ?? err.message, done: false }));
      },
    );
    req.once("error", (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message, done: false }));
    req.end(body);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("a night's preemption of an endpoint's only replica", () => {
  it("answers every caller after the cold start: none is reset", async () => {
    await createEndpoint(svc.server.url, {
      name: "night",
      template_name: "budget",
      replicas: 1,
      max_cost_per_hour: 5,
      capacity: { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 },
    });
    const ready = await waitForEndpoint(svc.server.url, "night", "ready", (e) => e.state === "ready", 30_000);
    const victim = ready.instances!.find((i) => i.state === "ready")!.instance_id;
    const machine = (await svc.db.knex("gpu_instances").where({ instance_id: victim }).first()).market_instance_id as string;
    const agent = new Agent({ keepAlive: true });
    // Warm the agent's sockets, as a day's earlier traffic does.
    expect(await Promise.all([stream(agent, "night"), stream(agent, "night")])).toEqual([
      { status: 200, done: true },
      { status: 200, done: true },
    ]);

    const outcomes: Array<Promise<Outcome>> = [];
    outcomes.push(stream(agent, "night"));
    await sleep(120); // its first tokens have come
    outcomes.push(stream(agent, "night")); // sent as the machine goes
    await svc.market.preempt(machine);
    outcomes.push(stream(agent, "night")); // to the dead replica, still listed
    await sleep(300);
    outcomes.push(stream(agent, "night")); // while the replacement is cold
    const answered = await Promise.all(outcomes);
    expect(answered).toEqual(answered.map(() => ({ status: 200, done: true })));
    agent.destroy();
    await deleteAndWait(svc.server.url, "night", svc.db.knex);
  }, 60_000);
});
