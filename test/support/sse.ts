// Reading a streamed completion in tests: the `data:` payloads of a server-sent event stream, and
// the chunks' JSON.

/** The `data:` payloads of an event stream, in order. */
export function sseData(text: string): string[] {
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("data: "))
    .map((block) => block.slice("data: ".length));
}

export interface StreamChunk {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{ index: number; delta?: { role?: string; content?: string }; text?: string; finish_reason: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/** The JSON chunks of a stream (its `[DONE]` left out). */
export function sseChunks(text: string): StreamChunk[] {
  return sseData(text)
    .filter((data) => data !== "[DONE]")
    .map((data) => JSON.parse(data) as StreamChunk);
}

/** The answer's text, chat deltas or completions text, joined. */
export function chunksText(chunks: StreamChunk[]): string {
  return chunks.map((c) => c.choices.map((choice) => choice.delta?.content ?? choice.text ?? "").join("")).join("");
}
