import { promptBlocks, type BlockHashes } from "../prefix-index/prompt-blocks.js";
import { readRawPrompt, UNREAD } from "../prefix-index/raw-prompt.js";
import type { RecentMessages } from "../prefix-index/recent-messages.js";
import type { CompletionPath } from "./continuation/continuation-request.js";
import { streamPlanOf, type StreamPlan } from "./streamed-answer.js";

// A completion's body as the proxy reads it, parsed at most once: whether it is streamed (its
// plan, streamed-answer.ts) and, for an endpoint routed by prefix, its prompt's blocks (read from
// the raw bytes where raw-prompt.ts can, streamed or not). A body that
// is not a JSON object is neither: it is passed on untouched, to the least busy replica.

export interface CompletionBody {
  plan: StreamPlan | undefined;
  /** Its prompt's block hashes; undefined when not asked for, or when the body has none (prompt-blocks.ts). */
  blocks: BlockHashes | undefined;
  /** Its max_tokens (else max_completion_tokens) when asked for and given: what a key's admission holds. */
  maxTokens?: number;
}

export interface CompletionWants {
  /** Its prompt's blocks, at most this many (an endpoint routed by prefix). */
  promptBlocks?: number;
  /** The messages of recent bodies, to take a chat's prompt up from (recent-messages.ts). */
  recentMessages?: RecentMessages;
  /** Its max_tokens (a key's admission). */
  maxTokens?: boolean;
}

const NOTHING: CompletionBody = { plan: undefined, blocks: undefined };
const STREAM_KEY = Buffer.from('"stream"');
const STREAM_NAME = Buffer.from("stream");

export function readCompletion(path: CompletionPath, bytes: Buffer, wants: CompletionWants = {}): CompletionBody {
  const maxBlocks = wants.promptBlocks;
  const wantMaxTokens = wants.maxTokens === true;
  // The prompt's blocks read from the bytes as they are (raw-prompt.ts), unless the reader gives up on them.
  let rawBlocks: BlockHashes | undefined | typeof UNREAD = UNREAD;
  if (!wantMaxTokens) {
    if (maxBlocks !== undefined) {
      const raw = readRawPrompt(path, bytes, maxBlocks, STREAM_NAME, wants.recentMessages);
      if (raw !== UNREAD) {
        // Not streamed: nothing else is wanted. Streamed: parsed for its plan, the prompt not read again.
        if (!raw.keyFound) return { plan: undefined, blocks: raw.blocks };
        rawBlocks = raw.blocks;
      }
    }
    // Most completions are not streamed: a body that never names "stream" is not parsed. (A key
    // spelled with JSON escapes is missed, and that answer is passed on untouched.)
    else if (!bytes.includes(STREAM_KEY)) return NOTHING;
  }
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch {
    return NOTHING;
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return NOTHING;
  const body = json as Record<string, unknown>;
  const read: CompletionBody = { plan: streamPlanOf(path, body), blocks: rawBlocks !== UNREAD ? rawBlocks : maxBlocks === undefined ? undefined : promptBlocks(path, body, maxBlocks) };
  const maxTokens = [body.max_tokens, body.max_completion_tokens].find((v) => Number.isSafeInteger(v) && (v as number) > 0);
  if (wantMaxTokens && maxTokens !== undefined) read.maxTokens = maxTokens as number;
  return read;
}
