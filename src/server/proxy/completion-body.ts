import { promptOf } from "../prefix-index/prompt-blocks.js";
import type { CompletionPath } from "./continuation/continuation-request.js";
import { streamPlanOf, type StreamPlan } from "./streamed-answer.js";

// A completion's body as the proxy reads it, parsed at most once: whether it is streamed (its
// plan, streamed-answer.ts) and, for an endpoint routed by prefix, its prompt. A body that is not a
// JSON object is neither: it is passed on untouched, to the least busy replica.

export interface CompletionBody {
  plan: StreamPlan | undefined;
  /** Undefined when not asked for, or when the body has none (prompt-blocks.ts). */
  prompt: string | undefined;
  /** Its max_tokens (else max_completion_tokens) when asked for and given: what a key's admission holds. */
  maxTokens?: number;
}

const NOTHING: CompletionBody = { plan: undefined, prompt: undefined };
const STREAM_KEY = Buffer.from('"stream"');

export function readCompletion(path: CompletionPath, bytes: Buffer, wantPrompt: boolean, wantMaxTokens = false): CompletionBody {
  // Most completions are not streamed: a body that never names "stream" is parsed only for its
  // prompt or max_tokens. (A key spelled with JSON escapes is missed, and that answer is passed on untouched.)
  if (!wantPrompt && !wantMaxTokens && !bytes.includes(STREAM_KEY)) return NOTHING;
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch {
    return NOTHING;
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return NOTHING;
  const body = json as Record<string, unknown>;
  const read: CompletionBody = { plan: streamPlanOf(path, body), prompt: wantPrompt ? promptOf(path, body) : undefined };
  const maxTokens = [body.max_tokens, body.max_completion_tokens].find((v) => Number.isSafeInteger(v) && (v as number) > 0);
  if (wantMaxTokens && maxTokens !== undefined) read.maxTokens = maxTokens as number;
  return read;
}
