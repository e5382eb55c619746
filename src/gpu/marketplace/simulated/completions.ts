import type { IncomingMessage, ServerResponse } from "node:http";
import { randomBytes } from "node:crypto";
import { parseCompletionRequest, type CompletionKind } from "./completion-request.js";
import { plannedAnswer } from "./simulated-answer.js";
import type { PrefixCache } from "./prefix-cache.js";
import type { PrefillLane } from "./prefill-lane.js";

// The simulated model server's OpenAI-compatible completions (`POST /v1/chat/completions` and
// `POST /v1/completions`), streamed as server-sent events in OpenAI's chunk format or answered
// whole. The text names the machine, so a caller can see which replica answered, and carries on
// where a continued answer stopped (simulated-answer.ts). Tokens come one `tokenDelayMs` apart, as a
// real model produces them, the first after `firstTokenMs` (0 by default) plus the end of the
// prompt's prefill: the tokens its prefix cache (prefix-cache.ts) did not hold, `prefillMsPerKtoken`
// a thousand, read in the server's one prefill lane (prefill-lane.ts) behind the prompts that came
// before it.

export interface CompletionSettings {
  model: string;
  /** The machine the server runs on, named in every answer. */
  instance: string;
  /** Time before the first token whatever the prompt, ms. */
  firstTokenMs: number;
  /** Time to read a thousand prompt tokens not found in the prefix cache, ms. */
  prefillMsPerKtoken: number;
  tokenDelayMs: number;
}

/** What a replica's GPU holds for its requests: the KV cache of prompts seen, and its prefill lane. */
export interface Engine {
  cache: PrefixCache;
  lane: PrefillLane;
}

/** What the server has seen: answers ended early because the client went away are counted apart. */
export interface CompletionStats {
  completions: number;
  abandoned: number;
}

const MAX_REQUEST_BYTES = 1024 * 1024;
const DEFAULT_MAX_TOKENS = 16;

export async function answerCompletion(
  kind: CompletionKind,
  req: IncomingMessage,
  res: ServerResponse,
  settings: CompletionSettings,
  stats: CompletionStats,
  engine: Engine,
): Promise<void> {
  const parsed = parseCompletionRequest(kind, await readBody(req), MAX_REQUEST_BYTES);
  if (typeof parsed === "string") return sendError(res, 400, parsed);
  if (parsed.model !== undefined && parsed.model !== settings.model) {
    return sendError(res, 404, `The model \`${parsed.model}\` does not exist.`);
  }
  stats.completions += 1;
  const { promptTokens, cachedTokens } = engine.cache.admit(parsed.prompt);
  const firstTokenMs = settings.firstTokenMs + engine.lane.enqueue(((promptTokens - cachedTokens) * settings.prefillMsPerKtoken) / 1000);
  const planned = plannedAnswer(parsed.prefix, settings, parsed.maxTokens);
  const tokens = planned.slice(0, parsed.maxTokens ?? DEFAULT_MAX_TOKENS);
  const finishReason = tokens.length < planned.length ? "length" : "stop";
  const base = { id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${randomBytes(12).toString("hex")}`, created: Math.floor(Date.now() / 1000), model: settings.model };
  const usage = (completion: number) => ({ prompt_tokens: parsed.promptTokens, total_tokens: parsed.promptTokens + completion, completion_tokens: completion });

  let gone = false;
  res.once("close", () => {
    if (!res.writableFinished) {
      gone = true;
      stats.abandoned += 1;
    }
  });
  const produce = async (emit: (token: string, index: number) => void) => {
    for (const [index, token] of tokens.entries()) {
      const wait = index === 0 ? firstTokenMs : settings.tokenDelayMs;
      if (wait > 0) await delay(wait);
      if (gone) return false;
      emit(token, index);
    }
    return true;
  };

  if (!parsed.stream) {
    let text = "";
    if (!(await produce((token) => (text += token)))) return;
    const choice =
      kind === "chat"
        ? { index: 0, message: { role: "assistant", content: text }, logprobs: null, finish_reason: finishReason }
        : { index: 0, text, logprobs: null, finish_reason: finishReason };
    return sendJson(res, 200, { ...base, object: kind === "chat" ? "chat.completion" : "text_completion", choices: [choice], usage: usage(tokens.length) });
  }

  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
  // Usage as vLLM sends it: on every chunk with continuous_usage_stats, and once at the end
  // (choices: []) with include_usage.
  const event = (data: object, completion: number) =>
    res.write(`data: ${JSON.stringify(parsed.usage === "continuous" ? { ...data, usage: usage(completion) } : data)}\n\n`);
  const chunk = (fields: Record<string, unknown>, finish: string | null) =>
    kind === "chat"
      ? { ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta: fields, logprobs: null, finish_reason: finish }] }
      : { ...base, object: "text_completion", choices: [{ index: 0, text: fields.content ?? "", logprobs: null, finish_reason: finish }] };
  if (kind === "chat") event(chunk({ role: "assistant", content: "" }, null), 0);
  if (!(await produce((token, index) => event(chunk({ content: token }, null), index + 1)))) return;
  event(chunk({}, finishReason), tokens.length);
  if (parsed.usage !== "none") {
    res.write(`data: ${JSON.stringify({ ...base, object: kind === "chat" ? "chat.completion.chunk" : "text_completion", choices: [], usage: usage(tokens.length) })}\n\n`);
  }
  res.end("data: [DONE]\n\n");
}

/** The whole body as text, or undefined when it is too large (the rest is drained, not kept). */
function readBody(req: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_REQUEST_BYTES) chunks.push(chunk);
    });
    req.once("end", () => resolve(size <= MAX_REQUEST_BYTES ? Buffer.concat(chunks).toString("utf8") : undefined));
    req.once("error", () => resolve(""));
  });
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

/** OpenAI's error shape. */
export function sendError(res: ServerResponse, status: number, message: string): void {
  const type = status === 401 ? "authentication_error" : status === 404 ? "not_found_error" : "invalid_request_error";
  sendJson(res, status, { error: { message, type, code: status } });
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
