// Bounds of the batch's bulk size (SPEC.md section 3): below the minimum the batch crawls with
// tiny bulks, above the maximum a single bulk request risks the request timeout (seed 001: a
// 200,000 chunk took over 30 seconds).
export const DEFAULT_CHUNK_SIZE = 50_000;
export const MIN_CHUNK_SIZE = 10_000;
export const MAX_CHUNK_SIZE = 100_000;

export interface ClampedChunkSize {
  chunkSize: number;
  /** Set when the requested value was changed, saying from what to what. */
  warning?: string;
}

/** The requested chunk_size brought into bounds; absent means the default. */
export function clampChunkSize(requested: number | undefined): ClampedChunkSize {
  if (requested === undefined) return { chunkSize: DEFAULT_CHUNK_SIZE };
  if (requested < MIN_CHUNK_SIZE) {
    return { chunkSize: MIN_CHUNK_SIZE, warning: `chunk_size ${requested} is below the minimum and was raised to ${MIN_CHUNK_SIZE}` };
  }
  if (requested > MAX_CHUNK_SIZE) {
    return { chunkSize: MAX_CHUNK_SIZE, warning: `chunk_size ${requested} is above the maximum and was lowered to ${MAX_CHUNK_SIZE}` };
  }
  return { chunkSize: requested };
}
