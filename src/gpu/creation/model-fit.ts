// What a model needs from a machine to be served by vLLM in 16-bit weights: memory for the weights,
// the KV cache of one full-length sequence, and a per-GPU working margin (activations, CUDA graphs),
// all inside the share of GPU memory vLLM is allowed to take. Tensor parallelism splits the model
// over the machine's GPUs; vLLM needs the GPU count to divide the attention and KV heads.

export interface ModelFacts {
  /** Parameters, billions. */
  parametersB: number;
  layers: number;
  attentionHeads: number;
  kvHeads: number;
  headDim: number;
  /** GPU counts the heads divide evenly: the tensor-parallel sizes vLLM accepts (of 1, 2, 4, 8). */
  tensorParallelSizes: number[];
}

/** The models the templates serve, from each model's config.json. */
const MODELS: Readonly<Record<string, Omit<ModelFacts, "tensorParallelSizes">>> = {
  "Qwen/Qwen2.5-Coder-32B-Instruct": { parametersB: 32.8, layers: 64, attentionHeads: 40, kvHeads: 8, headDim: 128 },
  "Qwen/Qwen2.5-Coder-14B-Instruct": { parametersB: 14.8, layers: 48, attentionHeads: 40, kvHeads: 8, headDim: 128 },
  "Qwen/Qwen2.5-Coder-7B-Instruct": { parametersB: 7.6, layers: 28, attentionHeads: 28, kvHeads: 4, headDim: 128 },
};

const GIB = 1024 ** 3;
const BYTES_PER_VALUE = 2; // bf16
/** Activations, CUDA graphs and the runtime, per GPU, GB. */
export const PER_GPU_MARGIN_GB = 1.5;
const GPU_COUNTS = [1, 2, 4, 8];

export function modelOf(name: string): ModelFacts {
  const model = MODELS[name];
  if (!model) throw new Error(`no model facts for ${name}`);
  const divides = (n: number) => model.attentionHeads % n === 0 && model.kvHeads % n === 0;
  return { ...model, tensorParallelSizes: GPU_COUNTS.filter(divides) };
}

/** GB the model takes on a machine of `gpus` GPUs serving sequences of `maxModelLen` tokens. */
export function memoryNeededGb(model: ModelFacts, maxModelLen: number, gpus: number): number {
  const weights = (model.parametersB * 1e9 * BYTES_PER_VALUE) / GIB;
  const kvPerToken = 2 * model.layers * model.kvHeads * model.headDim * BYTES_PER_VALUE;
  const kvCache = (kvPerToken * maxModelLen) / GIB;
  return weights + kvCache + gpus * PER_GPU_MARGIN_GB;
}
