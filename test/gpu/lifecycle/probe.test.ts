import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createModelServerProbe } from "../../../src/gpu/lifecycle/probe.js";
import { startModelServer, type ModelServer } from "../../../src/gpu/marketplace/simulated/model-server.js";

// running_llm means the model serves with our key: with a key the probe asks /v1/models with it,
// because /health answers anyone. Without one (instances created before keys) it asks /health.

const KEY = "k".repeat(43);
let keyed: ModelServer;
let open: ModelServer;
const probe = createModelServerProbe(1000);
const url = (server: ModelServer) => `http://127.0.0.1:${server.port}`;

beforeAll(async () => {
  keyed = await startModelServer({ model: "m", host: "127.0.0.1", apiKey: KEY });
  open = await startModelServer({ model: "m", host: "127.0.0.1" });
});

afterAll(async () => {
  await keyed?.close();
  await open?.close();
});

describe("the model-server probe", () => {
  it("sees a keyed server serving with its key", async () => {
    expect(await probe(url(keyed), KEY)).toBe(true);
  });

  it("does not take a server that refuses our key for ours, although its /health answers", async () => {
    expect((await fetch(`${url(keyed)}/health`)).status).toBe(200);
    expect(await probe(url(keyed), "another-key")).toBe(false);
  });

  it("counts a server that demands no key as serving: it answers our key too", async () => {
    // A server that ignores keys answers anyone: it serves, but our key protects nothing. It still
    // serves the model, so the probe says so; the key's protection is the launch plan's job.
    expect(await probe(url(open), KEY)).toBe(true);
  });

  it("probes an instance created before keys by /health, as before", async () => {
    expect(await probe(url(open), null)).toBe(true);
    expect(await probe(url(open))).toBe(true);
  });

  it("answers false for a server that is not there", async () => {
    expect(await probe("http://127.0.0.1:9", KEY)).toBe(false);
    expect(await probe("http://127.0.0.1:9", null)).toBe(false);
  });
});
