import { create } from "@bufbuild/protobuf";
import { TemplateSchema, type Template } from "../../../gen/gpu/v1/gpu_service_pb.js";

/** Container image every model-serving template runs. */
export const LLM_IMAGE = "vllm/vllm-openai:latest";
export const LLM_PORT = 8000;

// The three templates of the contract, in the order they are listed. A template is a cost guard:
// an instance created from it rents only offers with gpu_ram >= min_gpu_ram and
// dph_total <= max_price.
const TEMPLATES: readonly Template[] = [
  template("high_performance", "Qwen/Qwen2.5-Coder-32B-Instruct", 8192, 24, 2.0, 0.9),
  template("budget", "Qwen/Qwen2.5-Coder-7B-Instruct", 4096, 8, 0.5, 0.85),
  template("research", "Qwen/Qwen2.5-Coder-14B-Instruct", 8192, 16, 1.0, 0.9),
];

function template(
  name: string,
  llmModelName: string,
  llmMaxModelLen: number,
  minGpuRam: number,
  maxPrice: number,
  llmGpuMemoryUtilization: number,
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
