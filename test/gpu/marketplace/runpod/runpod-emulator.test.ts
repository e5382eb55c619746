import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startRunpodEmulator, type RunpodEmulator } from "../../../support/runpod/emulator.js";

// The emulator is only worth its tests if it refuses what RunPod refuses: these hold it to the
// OpenAPI file's rules, independently of the adapter.

const API_KEY = "rpa_test_key_0123456789";
let runpod: RunpodEmulator;

beforeEach(async () => {
  runpod = await startRunpodEmulator({ apiKey: API_KEY });
});

afterEach(async () => {
  await runpod.close();
  expect(runpod.breaches).toEqual([]);
});

const call = (method: string, path: string, body?: unknown, key = API_KEY) =>
  fetch(`${runpod.url}${path}`, {
    method,
    headers: { ...(key && { authorization: `Bearer ${key}` }), ...(body !== undefined && { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

const pod = { name: "p", image: "vllm/vllm-openai:latest", gpu: { id: "NVIDIA GeForce RTX 4090", count: 1 } };

describe("the RunPod emulator", () => {
  it("answers an unknown field with 422 listing each violation, and rents nothing", async () => {
    const answer = await call("POST", "/v2/pods", { ...pod, bogus: 1, gpu: { ...pod.gpu, vram: 24 } });
    expect(answer.status).toBe(422);
    expect(answer.headers.get("content-type")).toBe("application/problem+json");
    const problem = (await answer.json()) as { errors: string[] };
    expect(problem.errors).toEqual(expect.arrayContaining(["$: additional properties 'bogus' not allowed", "$.gpu: additional properties 'vram' not allowed"]));
    expect(runpod.pods.size).toBe(0);
  });

  it("answers a missing or wrong key with 401, and every answer to a known key with its rate-limit headers", async () => {
    expect((await call("GET", "/v2/pods", undefined, "")).status).toBe(401);
    expect((await call("GET", "/v2/pods", undefined, "wrong")).status).toBe(401);
    const answer = await call("GET", "/v2/pods");
    expect(answer.status).toBe(200);
    expect(answer.headers.get("ratelimit")).toMatch(/^"minute";r=\d+;t=\d+$/);
    expect(answer.headers.get("ratelimit-policy")).toBe(`"minute";q=1000;w=60`);
  });

  it("asks for product with include=AVAILABILITY and refuses availability filters without it (400), as documented", async () => {
    expect((await call("GET", "/v2/catalog/gpus?include=AVAILABILITY")).status).toBe(400);
    expect((await call("GET", "/v2/catalog/gpus?count=2")).status).toBe(400);
    expect((await call("GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&minCudaVersion=twelve")).status).toBe(422);
    const bare = (await (await call("GET", "/v2/catalog/gpus")).json()) as { gpus: Record<string, unknown>[] };
    expect(bare.gpus[0]).not.toHaveProperty("availability");
  });

  it("refuses a create with no stock for the count asked with 400, in RunPod's words", async () => {
    const answer = await call("POST", "/v2/pods", { ...pod, gpu: { id: "NVIDIA H100 80GB HBM3", count: 4 }, cloud: "COMMUNITY" });
    expect(answer.status).toBe(400);
    expect(((await answer.json()) as { detail: string }).detail).toMatch(/no longer any instances available/);
  });
});
