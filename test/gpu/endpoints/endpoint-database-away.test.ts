import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allowConnections, refuseConnections } from "../../support/postgres.js";
import { rest, waitFor } from "../helpers.js";
import { createEndpoint, deleteAndWait, startSimulatedService, waitForEndpoint, type SimulatedService } from "./helpers.js";

// PostgreSQL away under a served endpoint (a restart, a failover), on the real service: the
// database refuses every connection, and those open are ended. The replicas are still up, and
// the proxy routes a served endpoint from its last answer (up to DIRECTORY_STALE_MS); one it never
// read is answered 503; with the database back, everything reads it again.

let svc: SimulatedService;

beforeAll(async () => {
  svc = await startSimulatedService();
});

afterAll(async () => {
  if (svc !== undefined) await allowConnections(svc.db);
  await svc?.close();
});

/** A chat completion through the endpoint, streamed or not: its status and text. */
async function chat(name: string, stream = false): Promise<{ status: number; text: string }> {
  const res = await fetch(`${svc.server.url}/endpoints/${name}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "Qwen/Qwen2.5-Coder-7B-Instruct", messages: [{ role: "user", content: "hi" }], max_tokens: 8, stream }),
  });
  return { status: res.status, text: await res.text() };
}

describe("an endpoint with its database away", () => {
  it("is still served from its last route, streamed or not; one never read gets 503; the database back, all is read again", async () => {
    await createEndpoint(svc.server.url, { name: "served", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await createEndpoint(svc.server.url, { name: "unread", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "served", "ready", (e) => e.state === "ready");
    expect((await chat("served")).status).toBe(200);

    await refuseConnections(svc.db);
    try {
      // The API says the database is away (once the ended connections are found so); the model is still served.
      await waitFor("the API answering 503", async () => ((await rest(svc.server.url, "GET", "/api/gpu/endpoints/served")).status === 503 ? true : undefined));
      for (let i = 0; i < 5; i++) {
        const plain = await chat("served");
        expect(plain.status).toBe(200);
        expect(JSON.parse(plain.text)).toMatchObject({ object: "chat.completion" });
        const streamed = await chat("served", true);
        expect(streamed.status).toBe(200);
        expect(streamed.text.trimEnd().endsWith("data: [DONE]")).toBe(true);
      }
      const unread = await chat("unread");
      expect(unread.status).toBe(503);
      expect(JSON.parse(unread.text)).toMatchObject({ error: { code: "routing_unavailable" }, detail: "endpoint routing is unavailable" });
    } finally {
      await allowConnections(svc.db);
    }

    await waitFor("the API reading the database again", async () => ((await rest(svc.server.url, "GET", "/api/gpu/endpoints/unread")).status === 200 ? true : undefined));
    await waitForEndpoint(svc.server.url, "unread", "ready", (e) => e.state === "ready");
    expect((await chat("unread")).status).toBe(200);
    expect((await chat("served")).status).toBe(200);
    await deleteAndWait(svc.server.url, "served", svc.db.knex);
    await deleteAndWait(svc.server.url, "unread", svc.db.knex);
  });
});
