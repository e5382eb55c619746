import type { UsageAsked } from "./stream-reader.js";

// The requests of an answer that survives its replica (SPEC.md section 2): whether a streamed
// completion may be continued at all, the first request as the replica gets it (usage on every
// chunk, so the proxy knows the tokens passed on), and the continuation: the same request with
// the text so far (chat: as the final assistant message, continued as vLLM's
// `continue_final_message` does; completions: after the prompt) and the tokens that remain. Pure:
// bodies in, bodies out.

export type CompletionPath = "chat" | "completions";

export type Resumability = { resumable: true } | { resumable: false; reason: string };

/** Guided decoding options (vLLM's, llama.cpp's) that constrain the whole answer, not a part. */
const GUIDED = ["guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs", "grammar", "json_schema"] as const;

/** Whether a continuation could be the same answer; if not, why (for the caller's error event). */
export function resumability(path: CompletionPath, body: Record<string, unknown>): Resumability {
  const no = (reason: string): Resumability => ({ resumable: false, reason });
  if (body.stream !== true) return no("the answer is not streamed");
  if (given(body.n) && body.n !== 1) return no(`it asks n = ${JSON.stringify(body.n)} choices`);
  if (given(body.best_of) && body.best_of !== 1) return no(`it asks best_of = ${JSON.stringify(body.best_of)}`);
  if (nonEmpty(body.tools)) return no("it asks for tools");
  if (nonEmpty(body.functions)) return no("it asks for functions");
  const format = (body.response_format as { type?: unknown } | null | undefined)?.type;
  if (given(body.response_format) && format !== "text") return no(`it asks response_format ${JSON.stringify(format ?? body.response_format)}`);
  const guided = GUIDED.find((option) => given(body[option]));
  if (guided !== undefined) return no(`it asks guided decoding (${guided})`);
  if (given(body.logprobs) && body.logprobs !== false) return no("it asks logprobs");
  if (given(body.top_logprobs) && body.top_logprobs !== 0) return no("it asks top_logprobs");
  if (given(body.prompt_logprobs)) return no("it asks prompt_logprobs");
  if (body.echo === true) return no("it asks echo");
  if (path === "completions" && typeof body.prompt !== "string") return no("its prompt is not one string");
  if (path === "chat") {
    if (!Array.isArray(body.messages)) return no("its messages are not a list");
    if (body.continue_final_message === true && typeof finalAssistant(body.messages)?.content !== "string") {
      return no("the final assistant message it continues is not one string");
    }
  }
  return { resumable: true };
}

export interface FirstRequest {
  /** The caller's body with usage asked on every chunk. */
  body: Record<string, unknown>;
  /** The usage the caller itself asked for, which is all it is to see. */
  usage: UsageAsked;
  /** The answer's choices (`n`). */
  choices: number;
}

/** The first request as the replica gets it: the caller's, with continuous usage stats asked. */
export function firstRequest(body: Record<string, unknown>): FirstRequest {
  const options = isObject(body.stream_options) ? body.stream_options : {};
  const usage: UsageAsked = options.include_usage !== true ? "none" : options.continuous_usage_stats === true ? "continuous" : "final";
  return {
    body: { ...body, stream_options: { ...options, include_usage: true, continuous_usage_stats: true } },
    usage,
    choices: typeof body.n === "number" && body.n > 1 ? body.n : 1,
  };
}

export type Continuation = { finished: true } | { finished: false; body: Record<string, unknown> };

/**
 * The request that continues an answer on another replica, from the first request's body (as
 * `firstRequest` made it), the text passed on and the tokens that text took. `finished` when no
 * token remains of `max_tokens` (or `max_completion_tokens`): the answer ends there instead.
 */
export function continuationRequest(path: CompletionPath, first: Record<string, unknown>, text: string, tokens: number): Continuation {
  const body: Record<string, unknown> = { ...first };
  for (const limit of ["max_tokens", "max_completion_tokens"] as const) {
    if (typeof first[limit] !== "number") continue;
    const remaining = first[limit] - tokens;
    if (remaining <= 0) return { finished: true };
    body[limit] = remaining;
  }
  if (typeof first.min_tokens === "number") body.min_tokens = Math.max(0, first.min_tokens - tokens);
  // Nothing passed on yet: the first request again (an empty assistant message would be
  // continued as a closed turn by chat templates).
  if (text === "") return { finished: false, body };
  if (path === "completions") return { finished: false, body: { ...body, prompt: `${String(first.prompt)}${text}` } };
  const messages = [...(first.messages as unknown[])];
  const own = first.continue_final_message === true ? finalAssistant(messages) : undefined;
  if (own !== undefined) messages[messages.length - 1] = { ...own, content: `${String(own.content)}${text}` };
  else messages.push({ role: "assistant", content: text });
  return { finished: false, body: { ...body, messages, continue_final_message: true, add_generation_prompt: false } };
}

/** The final message when it is the assistant's. */
function finalAssistant(messages: unknown[]): { role: string; content: unknown } | undefined {
  const last = messages.at(-1);
  return isObject(last) && last.role === "assistant" ? (last as { role: string; content: unknown }) : undefined;
}

function given(value: unknown): boolean {
  return value !== undefined && value !== null;
}

function nonEmpty(value: unknown): boolean {
  return Array.isArray(value) ? value.length > 0 : given(value);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
