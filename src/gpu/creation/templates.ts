import { create } from "@bufbuild/protobuf";
import { TemplateSchema, type Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { modelOf } from "./model-fit.js";

/** Container image every model-serving template runs. */
export const LLM_IMAGE = "vllm/vllm-openai:latest";
export const LLM_PORT = 8000;
/** CUDA the image's vLLM build needs from the host's driver (vLLM's images are built for CUDA 12.8). */
export const LLM_MIN_CUDA = 12.8;

// The three templates of the contract, in the order they are listed. A template is a cost guard:
// an instance created from it rents only offers with gpu_ram >= min_gpu_ram and
// dph_total <= max_price. It also names what its model needs to run at all (model-fit.ts): GPU
// memory over the whole machine, the GPU counts tensor parallelism can split it over, and the
// driver's CUDA. test/gpu/creation/model-fit.test.ts checks that each model fits its floors.
const TEMPLATES: readonly Template[] = [
  template("high_performance", "Qwen/Qwen2.5-Coder-32B-Instruct", 8192, 24, 2.0, 0.9, 80),
  template("budget", "Qwen/Qwen2.5-Coder-7B-Instruct", 4096, 8, 0.5, 0.85, 24),
  template("research", "Qwen/Qwen2.5-Coder-14B-Instruct", 8192, 16, 1.0, 0.9, 40),
];

function template(
  name: string,
  llmModelName: string,
  llmMaxModelLen: number,
  minGpuRam: number,
  maxPrice: number,
  llmGpuMemoryUtilization: number,
  minTotalGpuRam: number,
): Template {
  return create(TemplateSchema, {
    name,
    config: {
      llmModelName,
      llmMaxModelLen,
      minGpuRam,
      maxPrice,
      imageName: LLM_IMAGE,
      llmGpuMemoryUtilization,
      llmPort: LLM_PORT,
      minTotalGpuRam,
      tensorParallelSizes: modelOf(llmModelName).tensorParallelSizes,
      minCuda: LLM_MIN_CUDA,
    },
  });
}

export function listTemplates(): readonly Template[] {
  return TEMPLATES;
}

/** The template of that name, or undefined. */
export function findTemplate(name: string): Template | undefined {
  return TEMPLATES.find((t) => t.name === name);
}
