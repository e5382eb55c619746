import type { Template } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { MODEL_API_KEY_ENV } from "../marketplace/port.js";
import { randomBytes } from "node:crypto";
import type { CustomConfig } from "./custom-config.js";
import { LLM_PORT } from "./templates.js";

// What an instance runs: the image, the start command and environment of its model server
// (templates), or a bare CUDA image with no command (no template). The model server splits the
// model over all of the machine's GPUs (tensor parallelism), so its command is completed once the
// offer, and with it the GPU count, is known (onMachine).

/** Image of an instance created without a template: a bare CUDA runtime, no model server. */
export const BARE_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04";
/** Disk of a bare instance, GB. */
export const BARE_DISK_GB = 16;
/** Disk of a model-serving instance, GB: the image, and weights of up to a 32B model in 16 bits. */
export const LLM_DISK_GB = 100;

export interface LaunchPlan {
  image: string;
  diskGb: number;
  startCommand: string;
  env: Record<string, string>;
  llmPort?: number;
  llmModelName?: string;
  /** The lowest CUDA version the image needs (the template's), for markets that place by it. */
  minCuda?: number;
  autoDestroy: boolean;
  /** The model server runs with --tensor-parallel-size set to the machine's GPU count. */
  tensorParallel?: boolean;
}

/** The plan's command and environment on a machine of `numGpus` GPUs. */
export function onMachine(plan: LaunchPlan, numGpus: number): Pick<LaunchPlan, "startCommand" | "env"> {
  if (!plan.tensorParallel) return { startCommand: plan.startCommand, env: plan.env };
  return {
    startCommand: `${plan.startCommand} --tensor-parallel-size ${numGpus}`,
    env: { ...plan.env, LLM_TENSOR_PARALLEL_SIZE: String(numGpus) },
  };
}

/** A model server's key: 32 random bytes, as URL-safe base64 (43 characters, fine in a header). */
export function newModelApiKey(): string {
  return randomBytes(32).toString("base64url");
}

/**
 * `modelApiKey`: the key the model server demands of every `/v1/...` call. vLLM reads it from
 * VLLM_API_KEY, the same as `--api-key`; the environment keeps it out of the start command,
 * which is stored and shown in instance answers.
 */
export function launchPlanOf(template: Template | undefined, custom: CustomConfig, modelApiKey?: string): LaunchPlan {
  const autoDestroy = custom.autoDestroy ?? false;
  if (!template?.config) return { image: BARE_IMAGE, diskGb: BARE_DISK_GB, startCommand: "", env: {}, autoDestroy };
  const config = template.config;
  const port = config.llmPort || LLM_PORT;
  const maxModelLen = custom.llmMaxModelLen ?? config.llmMaxModelLen;
  const memory = custom.llmGpuMemoryUtilization ?? config.llmGpuMemoryUtilization;
  return {
    image: config.imageName,
    tensorParallel: true,
    diskGb: LLM_DISK_GB,
    startCommand: [
      `vllm serve ${config.llmModelName}`,
      `--host 0.0.0.0 --port ${port}`,
      `--max-model-len ${maxModelLen}`,
      `--gpu-memory-utilization ${memory}`,
    ].join(" "),
    env: {
      LLM_MODEL_NAME: config.llmModelName,
      LLM_MAX_MODEL_LEN: String(maxModelLen),
      LLM_GPU_MEMORY_UTILIZATION: String(memory),
      ...(modelApiKey !== undefined ? { [MODEL_API_KEY_ENV]: modelApiKey } : {}),
    },
    llmPort: port,
    llmModelName: config.llmModelName,
    ...(config.minCuda ? { minCuda: config.minCuda } : {}),
    autoDestroy,
  };
}
