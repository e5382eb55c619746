import type { IncomingMessage, ServerResponse } from "node:http";
import { randomBytes } from "node:crypto";

// The simulated model server's OpenAI-compatible completions (`POST /v1/chat/completions` and
// `POST /v1/completions`), streamed as server-sent events in OpenAI's chunk format or answered
// whole. The text names the machine, so a caller can see which replica answered. Tokens come one
// `tokenDelayMs` apart, as a real model produces them, the first after `firstTokenMs` (0 by default).

export type CompletionKind = "chat" | "text";

export interface CompletionSettings {
  model: string;
  /** The machine the server runs on, named in every answer. */
  instance: string;
  /** Time before the first token (a real model reads the prompt first), ms. */
  firstTokenMs: number;
  tokenDelayMs: number;
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
): Promise<void> {
  const parsed = parseRequest(await readBody(req));
  if (typeof parsed === "string") return sendError(res, 400, parsed);
  if (parsed.model !== undefined && parsed.model !== settings.model) {
    return sendError(res, 404, `The model \`${parsed.model}\` does not exist.`);
  }
  stats.completions += 1;
  const words = `Hello from instance ${settings.instance}, serving ${settings.model}. This answer is simulated.`.split(" ");
  const tokens = words.slice(0, parsed.maxTokens).map((w, i) => (i === 0 ? w : ` ${w}`));
  const finishReason = tokens.length < words.length ? "length" : "stop";
  const base = { id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${randomBytes(12).toString("hex")}`, created: Math.floor(Date.now() / 1000), model: settings.model };

  let gone = false;
  res.once("close", () => {
    if (!res.writableFinished) {
      gone = true;
      stats.abandoned += 1;
    }
  });
  const produce = async (emit: (token: string, index: number) => void) => {
    for (const [index, token] of tokens.entries()) {
      const wait = index === 0 ? settings.firstTokenMs : settings.tokenDelayMs;
      if (wait > 0) await delay(wait);
      if (gone) return false;
      emit(token, index);
    }
    return true;
  };

  if (!parsed.stream) {
    let text = "";
    if (!(await produce((token) => (text += token)))) return;
    const usage = { prompt_tokens: parsed.promptTokens, completion_tokens: tokens.length, total_tokens: parsed.promptTokens + tokens.length };
    const choice =
      kind === "chat"
        ? { index: 0, message: { role: "assistant", content: text }, logprobs: null, finish_reason: finishReason }
        : { index: 0, text, logprobs: null, finish_reason: finishReason };
    return sendJson(res, 200, { ...base, object: kind === "chat" ? "chat.completion" : "text_completion", choices: [choice], usage });
  }

  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
  const event = (data: unknown) => res.write(`data: ${JSON.stringify(data)}\n\n`);
  const chunk = (fields: Record<string, unknown>, finish: string | null) =>
    kind === "chat"
      ? { ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta: fields, logprobs: null, finish_reason: finish }] }
      : { ...base, object: "text_completion", choices: [{ index: 0, text: fields.content ?? "", logprobs: null, finish_reason: finish }] };
  if (kind === "chat") event(chunk({ role: "assistant", content: "" }, null));
  if (!(await produce((token) => event(chunk({ content: token }, null))))) return;
  event(chunk({}, finishReason));
  res.end("data: [DONE]\n\n");
}

interface CompletionRequest {
  model: string | undefined;
  stream: boolean;
  maxTokens: number;
  promptTokens: number;
}

/** The fields the simulation uses, or the reason the request is refused. */
function parseRequest(body: string | undefined): CompletionRequest | string {
  if (body === undefined) return `request body over ${MAX_REQUEST_BYTES} bytes`;
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return "request body is not valid JSON";
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return "request body must be a JSON object";
  const { model, stream, max_tokens: maxTokens, max_completion_tokens: maxCompletionTokens } = json as Record<string, unknown>;
  if (model !== undefined && typeof model !== "string") return "'model' must be a string";
  if (stream !== undefined && typeof stream !== "boolean") return "'stream' must be a boolean";
  const limit = maxCompletionTokens ?? maxTokens;
  if (limit !== undefined && !(Number.isInteger(limit) && (limit as number) >= 1)) return "'max_tokens' must be an integer >= 1";
  return {
    model,
    stream: stream === true,
    maxTokens: (limit as number | undefined) ?? DEFAULT_MAX_TOKENS,
    promptTokens: Math.max(1, Math.ceil(body.length / 4)),
  };
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
