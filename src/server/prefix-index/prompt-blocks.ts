// A prompt as the prefix index sees it (SPEC.md section 2, "Requests that share a prompt go where
// it is cached"): its text in order (a chat request's messages, roles and contents; a
// completion's prompt), cut in blocks of BLOCK_CHARS characters, each block named by a hash of
// everything up to its end. Two prompts share their first k block hashes exactly when they share
// their first k blocks of text (up to a 32-bit hash's collisions, which cost only a routing
// choice), as a model server's prefix cache shares its first k blocks of KV.

/**
 * Characters in a block: about 16 tokens of English, vLLM's KV block size. Only whole blocks are
 * hashed, as a model server caches only whole blocks; a shorter prompt has none.
 */
export const BLOCK_CHARS = 64;

/** What a request asks a model to read first: a chat's messages, or a completion's prompt. */
export type PromptKind = "chat" | "completions";

// Separators that a message's text cannot forge with an ordinary character.
const ROLE_END = "\u0000";
const MESSAGE_END = "\u0001";

/**
 * The prompt of a parsed request body, or undefined when it has none the index can read
 * (no messages list, no prompt): such a request is routed by load alone.
 */
export function promptOf(kind: PromptKind, body: Record<string, unknown>): string | undefined {
  if (kind === "completions") {
    const prompt = body.prompt;
    if (typeof prompt === "string") return prompt;
    // A batch of prompts or token ids: its text as JSON, equal for equal prompts.
    return Array.isArray(prompt) ? JSON.stringify(prompt) : undefined;
  }
  const messages = body.messages;
  if (!Array.isArray(messages)) return undefined;
  let text = "";
  for (const message of messages) {
    const { role, content } = (typeof message === "object" && message !== null ? message : {}) as { role?: unknown; content?: unknown };
    text += `${typeof role === "string" ? role : ""}${ROLE_END}${typeof content === "string" ? content : JSON.stringify(content ?? null)}${MESSAGE_END}`;
  }
  return text;
}

/**
 * The chained hashes of `text`'s whole blocks: one running FNV-1a over its UTF-16 code units, read
 * at each block's end, so that a block's hash names its prefix, not only its own characters.
 * Int32 values: small integers in V8, cheap as map keys.
 */
export function blockHashes(text: string, blockChars: number = BLOCK_CHARS): Int32Array {
  const blocks = new Int32Array(Math.floor(text.length / blockChars));
  let hash = 0x811c9dc5;
  let at = 0;
  for (let b = 0; b < blocks.length; b++) {
    const end = at + blockChars;
    for (; at < end; at++) hash = Math.imul(hash ^ text.charCodeAt(at), 0x01000193);
    blocks[b] = hash;
  }
  return blocks;
}
