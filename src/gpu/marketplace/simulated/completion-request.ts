// The fields of a completions request the simulated model server reads, checked as vLLM checks
// them: `continue_final_message` continues the final message and refuses `add_generation_prompt`
// (which defaults to true) beside it; `stream_options` only with `stream`; usage on every chunk
// only with `include_usage` and `continuous_usage_stats` both.

export type CompletionKind = "chat" | "text";

/** Which usage a streamed answer carries: none, one final chunk, or on every chunk as well. */
export type StreamUsage = "none" | "final" | "continuous";

export interface CompletionRequest {
  model: string | undefined;
  stream: boolean;
  /** `max_completion_tokens` or `max_tokens`; undefined when the caller gave neither. */
  maxTokens: number | undefined;
  promptTokens: number;
  /** The text the answer continues: the final message (continue_final_message) or the prompt. */
  prefix: string;
  /** What the model reads, as its prefix cache sees it: the chat's messages in order (roles and contents), or the prompt. */
  prompt: string;
  usage: StreamUsage;
}

/** The fields the simulation uses, or the reason the request is refused (400). */
export function parseCompletionRequest(kind: CompletionKind, body: string | undefined, maxBytes: number): CompletionRequest | string {
  if (body === undefined) return `request body over ${maxBytes} bytes`;
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return "request body is not valid JSON";
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return "request body must be a JSON object";
  const fields = json as Record<string, unknown>;
  const { model, stream, max_tokens: maxTokens, max_completion_tokens: maxCompletionTokens } = fields;
  if (model !== undefined && typeof model !== "string") return "'model' must be a string";
  if (stream !== undefined && typeof stream !== "boolean") return "'stream' must be a boolean";
  const limit = maxCompletionTokens ?? maxTokens;
  if (limit !== undefined && !(Number.isInteger(limit) && (limit as number) >= 1)) return "'max_tokens' must be an integer >= 1";
  const usage = streamUsage(fields.stream_options, stream === true);
  if (usage === undefined) return "Stream options can only be defined when `stream=True`.";
  const prefix = kind === "chat" ? continuedMessage(fields) : typeof fields.prompt === "string" ? fields.prompt : "";
  if (prefix === undefined) return "Cannot set both `continue_final_message` and `add_generation_prompt` to True.";
  return {
    model,
    stream: stream === true,
    maxTokens: limit as number | undefined,
    promptTokens: Math.max(1, Math.ceil(body.length / 4)),
    prefix,
    prompt: kind === "chat" ? chatPrompt(fields.messages) : typeof fields.prompt === "string" ? fields.prompt : "",
    usage,
  };
}

/** The messages as one text, each role and content in order, as a chat template lays them out. */
function chatPrompt(messages: unknown): string {
  if (!Array.isArray(messages)) return "";
  return messages.map((message: { role?: unknown; content?: unknown } | null) => `<|${String(message?.role ?? "")}|>\n${contentText(message?.content)}\n`).join("");
}

/** A message's text: a string, or its text parts joined. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => ((part as { type?: unknown }).type === "text" ? String((part as { text?: unknown }).text ?? "") : "")).join("");
}

/** The usage a stream asked for, or undefined for stream options on an answer not streamed. */
function streamUsage(options: unknown, stream: boolean): StreamUsage | undefined {
  if (options === undefined || options === null) return "none";
  if (!stream) return undefined;
  const { include_usage: includeUsage, continuous_usage_stats: continuous } = options as Record<string, unknown>;
  if (includeUsage !== true) return "none";
  return continuous === true ? "continuous" : "final";
}

/** The final message's text when the request continues it, "" when not; undefined: refused. */
function continuedMessage(fields: Record<string, unknown>): string | undefined {
  if (fields.continue_final_message !== true) return "";
  if (fields.add_generation_prompt !== false) return undefined;
  const messages = Array.isArray(fields.messages) ? (fields.messages as unknown[]) : [];
  return contentText((messages.at(-1) as { content?: unknown } | undefined)?.content);
}
