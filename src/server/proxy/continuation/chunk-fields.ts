import type { Span } from "./json-cursor.js";

// What continuation reads in one streamed chunk, and where each part sits in its text (a span),
// so that the reader can cut or replace it in place.

export type { Span };

export interface ChoiceScan {
  index: number;
  /** Chat `delta.content` or completions `text`; undefined when the choice has none. */
  text: string | undefined;
  /** A chat delta's `reasoning_content` (vLLM's reasoning parsers) and `reasoning` (its newer name), kept apart from the text. */
  reasoningContent: string | undefined;
  reasoning: string | undefined;
  /** A chat delta's `role` is present (the opening chunk). */
  role: boolean;
  /** null while the choice goes on; undefined when the chunk does not say. */
  finishReason: string | null | undefined;
}

export interface ChunkScan {
  /** The raw JSON values of the top-level `id`, `created`, `model`. */
  id: Span | undefined;
  created: Span | undefined;
  model: Span | undefined;
  /** The `choices` array read, or undefined without one. */
  choices: ChoiceScan[] | undefined;
  /** The `usage` member with the comma that joins it to its neighbour: cut it to remove usage. */
  usageMember: Span | undefined;
  /** The `usage` value alone (`null` included). */
  usageValue: Span | undefined;
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** The chunk is an error (`{"error": ...}`, or `"object": "error"`). */
  error: boolean;
}

