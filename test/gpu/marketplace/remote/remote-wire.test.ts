import { describe, expect, it } from "vitest";
import { OperationFailedError } from "../../../../src/errors.js";
import { parseRetryAfter } from "../../../../src/gpu/marketplace/http/json-http.js";
import { parseInstanceAnswer, parseOffers, toCreateBody } from "../../../../src/gpu/marketplace/remote/remote-wire.js";

const INSTANCE = {
  id: "9", offer_id: "31", label: "gpu-1", status: "running", public_ip: "203.0.113.7", ssh_port: 20001,
  port_mappings: { "8000/tcp": 41234 }, gpu_name: "L4", num_gpus: 1, gpu_ram: 24, dph_total: 0.41,
};

describe("marketplace wire mapping", () => {
  it("maps snake_case instances to the port's shape", () => {
    expect(parseInstanceAnswer({ instance: INSTANCE })).toEqual({
      id: "9", offerId: "31", label: "gpu-1", status: "running", publicIp: "203.0.113.7", sshPort: 20001,
      portMappings: { "8000/tcp": 41234 }, gpuName: "L4", numGpus: 1, gpuRam: 24, dphTotal: 0.41, interruptible: false,
    });
  });

  it("refuses answers that do not match the contract, naming the field", () => {
    expect(() => parseInstanceAnswer({ instance: { ...INSTANCE, status: "sleeping" } })).toThrow(/instance.status/);
    // The contract rents no interruptible machines: preempted is none of its statuses.
    expect(() => parseInstanceAnswer({ instance: { ...INSTANCE, status: "preempted" } })).toThrow(/instance.status/);
    expect(() => parseOffers({ offers: [{ id: 1 }] })).toThrow(OperationFailedError);
    expect(() => parseOffers({ offers: [{ id: "1", gpu_name: "L4", num_gpus: 1, gpu_ram: 24, dph_total: "cheap", rentable: true }] }))
      .toThrow(/offers\[0\].dph_total is not a number/);
    expect(() => parseOffers([])).toThrow(/answer is not an object/);
  });

  it("sends the model fields only when the instance serves a model", () => {
    const base = { offerId: "1", label: "gpu-1", image: "img", startCommand: "run", env: {} };
    expect(toCreateBody(base)).toEqual({ offer_id: "1", label: "gpu-1", image: "img", start_command: "run", env: {} });
    expect(toCreateBody({ ...base, llmPort: 8000, llmModelName: "m" })).toMatchObject({ llm_port: 8000, llm_model_name: "m" });
  });
});

describe("Retry-After", () => {
  it("reads delta-seconds and HTTP dates, and ignores what it cannot read", () => {
    const now = Date.parse("2026-11-21T12:00:00Z");
    expect(parseRetryAfter("2", now)).toBe(2000);
    expect(parseRetryAfter("Sat, 21 Nov 2026 12:00:05 GMT", now)).toBe(5000);
    expect(parseRetryAfter("Sat, 21 Nov 2026 11:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter("soon", now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });
});
