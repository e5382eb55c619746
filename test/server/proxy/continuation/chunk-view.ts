import type { ChunkScan, Span } from "../../../../src/server/proxy/continuation/chunk-fields.js";

// What a chunk reader's result says of a chunk, in JSON.parse's terms, beside what JSON.parse says
// of the same chunk: the two must be equal for any reader that reads the chunk right.

interface ParsedChunk {
  id?: unknown;
  created?: unknown;
  model?: unknown;
  choices?: Array<{
    index: number;
    text?: unknown;
    delta?: { role?: unknown; content?: unknown; reasoning_content?: unknown; reasoning?: unknown };
    finish_reason?: string | null;
  }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
}

export interface ChunkView {
  id: unknown;
  created: unknown;
  model: unknown;
  choices: unknown;
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** The usage value, and the chunk with its usage member cut out (absent without usage). */
  usage?: unknown;
  withoutUsage?: unknown;
  error: boolean;
}

/** What JSON.parse says of `chunk`. */
export function parsedView(chunk: string): ChunkView {
  const parsed = JSON.parse(chunk) as ParsedChunk;
  const view: ChunkView = {
    id: parsed.id,
    created: parsed.created,
    model: parsed.model,
    choices: parsed.choices?.map((c) => ({
      index: c.index,
      text: textOrNone(c.delta ? c.delta.content : c.text),
      reasoningContent: textOrNone(c.delta?.reasoning_content),
      reasoning: textOrNone(c.delta?.reasoning),
      role: c.delta?.role !== undefined,
      finishReason: c.finish_reason,
    })),
    promptTokens: parsed.usage?.prompt_tokens,
    completionTokens: parsed.usage?.completion_tokens,
    error: false,
  };
  if ("usage" in parsed) {
    const { usage, ...rest } = parsed;
    view.usage = usage;
    view.withoutUsage = rest;
  }
  return view;
}

/** What `scan` says of `chunk`, its spans read with JSON.parse. */
export function scannedView(chunk: string, scan: ChunkScan): ChunkView {
  const raw = (span: Span | undefined) => (span === undefined ? undefined : (JSON.parse(chunk.slice(span.start, span.end)) as unknown));
  const view: ChunkView = {
    id: raw(scan.id),
    created: raw(scan.created),
    model: raw(scan.model),
    choices: scan.choices,
    promptTokens: scan.promptTokens,
    completionTokens: scan.completionTokens,
    error: scan.error,
  };
  if (scan.usageValue !== undefined && scan.usageMember !== undefined) {
    view.usage = raw(scan.usageValue);
    view.withoutUsage = JSON.parse(chunk.slice(0, scan.usageMember.start) + chunk.slice(scan.usageMember.end)) as unknown;
  }
  return view;
}

/** A reader keeps text only when it is a string. */
function textOrNone(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}
