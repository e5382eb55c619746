import { describe, expect, it } from "vitest";
import { InvalidInputError, OperationFailedError } from "../../../../src/errors.js";
import type { CreateMarketInstanceRequest } from "../../../../src/gpu/marketplace/port.js";
import { parseStructuredList } from "../../../../src/gpu/marketplace/runpod/runpod-rate.js";
import { cudaVersionText, offerIdOf, parseOfferId, parsePod, parsePodList, toCreateBody } from "../../../../src/gpu/marketplace/runpod/runpod-wire.js";
import { violations } from "../../../support/runpod/contract.js";

const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";

function request(extra: Partial<CreateMarketInstanceRequest> = {}): CreateMarketInstanceRequest {
  return {
    offerId: "secure-2x-NVIDIA_GeForce_RTX_4090",
    label: "gpu-3f2a",
    image: "vllm/vllm-openai:latest",
    diskGb: 100,
    startCommand: `vllm serve ${MODEL} --host 0.0.0.0 --port 8000 --max-model-len 8192`,
    env: { LLM_MODEL_NAME: MODEL, VLLM_API_KEY: "k".repeat(43) },
    llmPort: 8000,
    llmModelName: MODEL,
    minCuda: 12.1,
    ...extra,
  };
}

const key = { cloud: "SECURE" as const, count: 2, gpuTypeId: "NVIDIA GeForce RTX 4090" };

/** A pod as RunPod's OpenAPI file describes it, with `fields` on top. */
function pod(fields: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: "7h9k2m4n6p",
    name: "gpu-3f2a",
    status: "RUNNING",
    actions: ["stop", "terminate"],
    image: "vllm/vllm-openai:latest",
    args: MODEL,
    disk: 100,
    mounts: {},
    ports: ["8000/tcp"],
    env: {},
    registry: null,
    gpu: { id: "NVIDIA GeForce RTX 4090", count: 2 },
    cloud: "SECURE",
    dataCenterId: "US-KS-2",
    cudaVersion: "12.8",
    ssh: { proxy: null, direct: null },
    template: null,
    cost: 1.38,
    locked: false,
    globalNetworking: { enabled: false },
    runtime: { uptime: 5, ports: [{ private: 8000, public: 43210, type: "tcp", ip: "45.23.12.1" }] },
    createdAt: "2026-06-01T12:00:00Z",
    startedAt: "2026-06-01T12:00:10Z",
    ...fields,
  };
}

describe("RunPod's create body", () => {
  it("passes CreatePodRequest exactly: vLLM's arguments in args, 8000/tcp, the key in env, the CUDA floor as major.minor", () => {
    const body = toCreateBody(request(), key);
    expect(violations("CreatePodRequest", body)).toEqual([]);
    expect(body).toEqual({
      name: "gpu-3f2a",
      image: "vllm/vllm-openai:latest",
      cloud: "SECURE",
      gpu: { id: "NVIDIA GeForce RTX 4090", count: 2, minCudaVersion: "12.1" },
      disk: 100,
      env: { LLM_MODEL_NAME: MODEL, VLLM_API_KEY: "k".repeat(43) },
      args: `${MODEL} --host 0.0.0.0 --port 8000 --max-model-len 8192`,
      ports: ["8000/tcp"],
    });
  });

  it("leaves args, ports and the CUDA floor out of a bare machine, and still passes the contract", () => {
    const body = toCreateBody(request({ startCommand: "", llmPort: undefined, llmModelName: undefined, minCuda: undefined, env: {} }), key);
    expect(violations("CreatePodRequest", body)).toEqual([]);
    expect(body).not.toHaveProperty("args");
    expect(body).not.toHaveProperty("ports");
    expect(body.gpu).toEqual({ id: "NVIDIA GeForce RTX 4090", count: 2 });
  });

  it("refuses a start command the image's entrypoint cannot take, naming the field", () => {
    expect(() => toCreateBody(request({ startCommand: "python3 serve.py" }), key)).toThrow(InvalidInputError);
  });

  it("writes CUDA versions as RunPod's major.minor", () => {
    expect(cudaVersionText(12)).toBe("12.0");
    expect(cudaVersionText(12.4)).toBe("12.4");
    expect(cudaVersionText(undefined)).toBeUndefined();
  });
});

describe("RunPod's offer ids", () => {
  it("name the cloud, the count and the GPU type without spaces, and read back", () => {
    const id = offerIdOf({ cloud: "COMMUNITY", count: 4, gpuTypeId: "NVIDIA A100-SXM4-80GB" });
    expect(id).toBe("community-4x-NVIDIA_A100-SXM4-80GB");
    expect(parseOfferId(id)).toEqual({ cloud: "COMMUNITY", count: 4, gpuSlug: "NVIDIA_A100-SXM4-80GB" });
    expect(parseOfferId("31000001")).toBeUndefined();
    expect(parseOfferId("secure-0x-RTX")).toBeUndefined();
  });
});

describe("RunPod's pods", () => {
  it("pass the contract as written here (the fixture is a real pod)", () => {
    expect(violations("Pod", pod())).toEqual([]);
  });

  it.each([
    ["PROVISIONING", null, "creating"],
    ["STARTING", null, "loading"],
    ["RUNNING", { uptime: 1, ports: [] }, "loading"],
    ["RUNNING", { uptime: 1, ports: [{ private: 8000, public: null, type: "tcp", ip: null }] }, "loading"],
    ["RUNNING", { uptime: 1, ports: [{ private: 8000, public: 43210, type: "http", ip: "45.23.12.1" }] }, "loading"],
    ["RUNNING", undefined, "running"],
    ["EXITED", null, "exited"],
    ["ERROR", null, "exited"],
  ])("reads %s with runtime %j as %s", (status, runtime, expected) => {
    const read = parsePod(pod({ status, ...(runtime !== undefined && { runtime }) }), "answer");
    expect(read.status).toBe(expected);
    expect(read.failure !== undefined).toBe(status === "ERROR");
  });

  it("takes the address and the billed rate from the pod, its container disk added", () => {
    expect(parsePod(pod(), "answer")).toMatchObject({
      id: "7h9k2m4n6p",
      label: "gpu-3f2a",
      offerId: "secure-2x-NVIDIA_GeForce_RTX_4090",
      publicIp: "45.23.12.1",
      portMappings: { "8000/tcp": 43210 },
      numGpus: 2,
      // cost 1.38, and 100 GB of container disk at $0.10 per GB-month of 730 hours.
      dphTotal: 1.393699,
      interruptible: false,
    });
  });

  it("bills nothing for a stopped pod (cost 0: its container disk is gone with it)", () => {
    expect(parsePod(pod({ status: "EXITED", cost: 0 }), "answer").dphTotal).toBe(0);
  });

  it("leaves TERMINATED pods out of a list, and refuses a pod without the fields it needs, naming the field", () => {
    expect(parsePodList({ pods: [pod({ status: "TERMINATED", cost: 0 })] })).toEqual([]);
    const { cost: _cost, ...costless } = pod();
    expect(() => parsePodList({ pods: [costless] })).toThrow(/RunPod sent a malformed answer: pods\[0\]\.cost/);
    expect(() => parsePod(pod({ status: 7 }), "answer")).toThrow(OperationFailedError);
  });

  it("reads a state it does not know as no news of the pod, keeping RunPod's word, and goes on with the list", () => {
    const [strange, known] = parsePodList({ pods: [pod({ status: "HIBERNATING" }), pod({ id: "pod-2" })] });
    expect(strange).toMatchObject({ status: "offline", unknownState: "HIBERNATING" });
    expect(strange!.failure).toBeUndefined();
    expect(known).toMatchObject({ status: "running" });
    expect(known!.unknownState).toBeUndefined();
  });
});

describe("RunPod's rate-limit headers", () => {
  it("read as one set of numbers per window", () => {
    const read = parseStructuredList(`"minute";r=0;t=12, "hour";r=2800;t=1812, "day";r=49500;t=45012`);
    expect(read.get("minute")).toEqual({ r: 0, t: 12 });
    expect(read.get("hour")).toEqual({ r: 2800, t: 1812 });
    expect(parseStructuredList(null).size).toBe(0);
  });
});
