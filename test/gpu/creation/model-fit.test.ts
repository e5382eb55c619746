import { describe, expect, it } from "vitest";
import { memoryNeededGb, modelOf } from "../../../src/gpu/creation/model-fit.js";
import { listTemplates } from "../../../src/gpu/creation/templates.js";

// Each template's model must fit every machine the template can rent (SPEC.md section 2): on the
// smallest machine of each GPU count its floors allow, the share of GPU memory vLLM may take holds
// the 16-bit weights, the KV cache of one full-length sequence and a working margin per GPU.

describe("template fit", () => {
  for (const template of listTemplates()) {
    const config = template.config!;
    it(`${template.name}: ${config.llmModelName} fits the smallest machine of each GPU count it rents`, () => {
      const model = modelOf(config.llmModelName);
      expect(config.tensorParallelSizes).toEqual(model.tensorParallelSizes);
      for (const gpus of config.tensorParallelSizes) {
        const smallest = gpus * Math.max(config.minGpuRam, config.minTotalGpuRam / gpus);
        const usable = smallest * config.llmGpuMemoryUtilization;
        expect(usable, `${gpus} GPUs, ${smallest} GB`).toBeGreaterThanOrEqual(memoryNeededGb(model, config.llmMaxModelLen, gpus));
      }
    });
  }

  it("the seed's high_performance floors alone (24 GB, one GPU) could not hold the 32B model", () => {
    const model = modelOf("Qwen/Qwen2.5-Coder-32B-Instruct");
    expect(24 * 0.9).toBeLessThan(memoryNeededGb(model, 8192, 1));
    expect(memoryNeededGb(model, 8192, 1)).toBeGreaterThan(60); // ~61 GB of weights alone
  });

  it("splits a model only over GPU counts that divide its attention and KV heads", () => {
    expect(modelOf("Qwen/Qwen2.5-Coder-32B-Instruct").tensorParallelSizes).toEqual([1, 2, 4, 8]);
    expect(modelOf("Qwen/Qwen2.5-Coder-7B-Instruct").tensorParallelSizes).toEqual([1, 2, 4]); // 28 heads, 4 KV heads
  });

  it("counts the KV cache of one full-length sequence: 2 x layers x KV heads x head dim x 2 bytes per token", () => {
    const model = modelOf("Qwen/Qwen2.5-Coder-14B-Instruct");
    const withoutCache = memoryNeededGb(model, 0, 1);
    expect(memoryNeededGb(model, 8192, 1) - withoutCache).toBeCloseTo((2 * 48 * 8 * 128 * 2 * 8192) / 1024 ** 3, 6);
  });
});
