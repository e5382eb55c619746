import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rest, waitFor } from "../../gpu/helpers.js";
import { createEndpoint, readyIds, startSimulatedService, waitForEndpoint, type SimulatedService } from "../../gpu/endpoints/helpers.js";

// The proxy on the real service: an endpoint created over REST, its replicas rented on the
// simulated marketplace (real model servers that demand their own keys), kept ready by the
// controller, and reached at /endpoints/{name}/v1/... on the service's port.

let svc: SimulatedService;

beforeAll(async () => {
  svc = await startSimulatedService();
});

afterAll(async () => {
  await svc?.close();
});

const chat = { messages: [{ role: "user", content: "hi" }], max_tokens: 3 };
const post = (path: string, body: unknown) => fetch(`${svc.server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
const marketIdOf = async (instanceId: string) =>
  ((await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string }).market_instance_id;

describe("the endpoint proxy on the service", () => {
  it("holds a request sent while the endpoint starts, and answers it from its first ready replica", async () => {
    await createEndpoint(svc.server.url, { name: "early", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const res = await post("/endpoints/early/v1/chat/completions", chat);
    expect(res.status).toBe(200);
    const ready = await waitForEndpoint(svc.server.url, "early", "ready", (e) => e.state === "ready");
    expect(readyIds(ready)).toContain(res.headers.get("x-endpoint-instance"));
    expect(((await res.json()) as { object: string }).object).toBe("chat.completion");
    // A parked endpoint has nothing coming: 503 at once.
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/early", { replicas: 0 })).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // the directory's cached answer expires
    const parked = await post("/endpoints/early/v1/chat/completions", chat);
    expect(parked.status).toBe(503);
    expect(((await parked.json()) as { detail: string }).detail).toMatch(/parked/);
  });

  it("serves a ready endpoint's model, streamed, from both replicas, each with its own key", async () => {
    await createEndpoint(svc.server.url, { name: "e2e", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "e2e", "ready", (e) => e.state === "ready");
    const ids = readyIds(ready);

    const streamed = await post("/endpoints/e2e/v1/chat/completions", { ...chat, stream: true });
    expect(streamed.status).toBe(200);
    const instance = streamed.headers.get("x-endpoint-instance")!;
    expect(ids).toContain(instance);
    const text = await streamed.text();
    expect(text).toContain(`"content":"Hello"`);
    expect(text).toContain(`"content":" instance"`);
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);

    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const res = await post("/endpoints/e2e/v1/completions", { prompt: "hi", max_tokens: 4 });
      expect(res.status).toBe(200);
      const answeredBy = res.headers.get("x-endpoint-instance")!;
      seen.add(answeredBy);
      // The model server names its machine: the marketplace's id of the instance that answered.
      expect(((await res.json()) as { choices: Array<{ text: string }> }).choices[0]!.text).toBe(`Hello from instance ${await marketIdOf(answeredBy)},`);
    }
    expect([...seen].sort()).toEqual([...ids].sort());
  });

  it("keeps answering while one replica's model dies: requests go to the other", async () => {
    const [victim, survivor] = readyIds(await waitForEndpoint(svc.server.url, "e2e", "ready", (e) => e.state === "ready"));
    await svc.market.stopModelServer(await marketIdOf(victim!));
    const answeredBy: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await post("/endpoints/e2e/v1/chat/completions", chat);
      expect(res.status).toBe(200);
      answeredBy.push(res.headers.get("x-endpoint-instance")!);
      await res.text();
    }
    expect(new Set(answeredBy)).toEqual(new Set([survivor]));
  });

  it("answers 404 for an unknown endpoint and, within a second of its deletion, for this one", async () => {
    expect((await post("/endpoints/nope/v1/chat/completions", chat)).status).toBe(404);
    expect((await rest(svc.server.url, "DELETE", "/api/gpu/endpoints/e2e")).status).toBe(200);
    await waitForEndpoint(svc.server.url, "e2e", "deleted", (e) => e.state === "deleted");
    // Every process's directory keeps an answer for about a second (endpoint-directory.ts).
    const gone = await waitFor("the proxy to forget e2e", async () => {
      const res = await post("/endpoints/e2e/v1/chat/completions", chat);
      return res.status === 404 ? ((await res.json()) as { detail: string }) : undefined;
    }, 3000);
    expect(gone.detail).toBe("endpoint 'e2e' not found");
  });
});
