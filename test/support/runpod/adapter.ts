import type { CreateMarketInstanceRequest, Marketplace } from "../../../src/gpu/marketplace/port.js";
import { createRunpodMarketplace, type RunpodMarketplaceOptions } from "../../../src/gpu/marketplace/runpod/runpod.js";
import type { RunpodEmulator } from "./emulator.js";

// The RunPod adapter on the emulator with clocks short enough for tests: 2 s timeouts, retries
// backing off from 5 ms, a lost create's pod looked for 50 ms. `options` overrides any of them.

export function runpodOn(runpod: RunpodEmulator, apiKey: string, options: Partial<RunpodMarketplaceOptions> = {}): Marketplace {
  return createRunpodMarketplace({ baseUrl: runpod.url, apiKey, timeoutMs: 2000, retries: 3, backoffMs: 5, createLookupMs: 50, ...options });
}

export const MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct";
export const MODEL_KEY = "m".repeat(43);

/** A model server's creation as GpuService asks for one. */
export function llmRequest(offerId: string, label: string, extra: Partial<CreateMarketInstanceRequest> = {}): CreateMarketInstanceRequest {
  return {
    offerId,
    label,
    image: "vllm/vllm-openai:latest",
    diskGb: 100,
    startCommand: `vllm serve ${MODEL} --host 0.0.0.0 --port 8000`,
    env: { LLM_MODEL_NAME: MODEL, VLLM_API_KEY: MODEL_KEY },
    llmPort: 8000,
    llmModelName: MODEL,
    minCuda: 12.1,
    ...extra,
  };
}
