import { createHash } from "node:crypto";

// A simulated model server's prefix cache, as vLLM keeps it (automatic prefix caching): the prompt
// cut in blocks of 16 tokens, each block named by a hash chained over every block before it, so a
// block matches only behind the same beginning; only full blocks are kept; the blocks live in an
// LRU within a KV budget of tokens. A prompt is looked up first (its leading blocks found are the
// hits), then all its full blocks are kept as the most recently used, the first ones last, so that
// under pressure a prompt's tail goes before its shared beginning (vLLM frees a request's blocks in
// reverse order for the same reason). A prompt found whole still computes its last token, as in
// vLLM, so its last block counts as a miss. Tokens are characters / 4, as the simulator counts them.

/** vLLM's default block size, in tokens. */
export const BLOCK_TOKENS = 16;
const CHARS_PER_TOKEN = 4;
const BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN;

/** Tokens since the server started: asked for (the prompts' tokens) and found cached, as vLLM counts them. */
export interface PrefixCacheCounts {
  queries: number;
  hits: number;
}

export interface PrefixCache {
  /** Looks the prompt up and keeps its blocks; its tokens, and those found cached. */
  admit(prompt: string): { promptTokens: number; cachedTokens: number };
  readonly counts: Readonly<PrefixCacheCounts>;
  /** Blocks held now (at most the budget's). */
  readonly blocks: number;
}

/** A cache of `kvTokens` tokens (rounded down to whole blocks); 0: caching off, every prompt a miss. */
export function createPrefixCache(kvTokens: number): PrefixCache {
  const capacity = Math.floor(kvTokens / BLOCK_TOKENS);
  // Insertion order is recency: the first key is the least recently used.
  const lru = new Set<string>();
  const counts: PrefixCacheCounts = { queries: 0, hits: 0 };
  return {
    admit(prompt) {
      const promptTokens = Math.ceil(prompt.length / CHARS_PER_TOKEN);
      const keys = blockKeys(prompt);
      const matchable = Math.min(keys.length, Math.floor(Math.max(0, promptTokens - 1) / BLOCK_TOKENS));
      let found = 0;
      while (found < matchable && lru.has(keys[found]!)) found += 1;
      const cachedTokens = found * BLOCK_TOKENS;
      counts.queries += promptTokens;
      counts.hits += cachedTokens;
      if (capacity > 0) {
        for (let i = keys.length - 1; i >= 0; i--) {
          lru.delete(keys[i]!);
          lru.add(keys[i]!);
        }
        for (const oldest of lru) {
          if (lru.size <= capacity) break;
          lru.delete(oldest);
        }
      }
      return { promptTokens, cachedTokens };
    },
    counts,
    get blocks() {
      return lru.size;
    },
  };
}

/** The chained hash of each full block of the prompt, in order. */
function blockKeys(prompt: string): string[] {
  const keys: string[] = [];
  let previous = "";
  for (let at = 0; at + BLOCK_CHARS <= prompt.length; at += BLOCK_CHARS) {
    previous = createHash("sha256").update(previous).update(prompt.slice(at, at + BLOCK_CHARS)).digest("base64url");
    keys.push(previous);
  }
  return keys;
}
