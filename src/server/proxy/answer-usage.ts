import type { AnswerReader } from "./continuation/stream-reader.js";

// What one answer used, for its caller's usage and limits (SPEC.md section 2, "Keys for callers"):
// the tokens the replica itself counted, or, when it did not (an answer cut and not continued,
// the caller gone, a server that sends no usage), an estimate marked as such: the prompt as its
// body's bytes / 4 and one completion token per event that carried text.

export interface AnswerUsage {
  promptTokens: number;
  completionTokens: number;
  /** Some of it is an estimate: a replica did not count it. */
  estimated: boolean;
}

/** A request that reached no model (refused, or not a completion): nothing used. */
export const NO_USAGE: AnswerUsage = Object.freeze({ promptTokens: 0, completionTokens: 0, estimated: false });

/** The prompt's tokens estimated from its body's size. */
export function estimatedPromptTokens(bodyBytes: number): number {
  return Math.ceil(bodyBytes / 4);
}

/** A streamed answer's usage as the caller received it: a continued answer counts once. */
export function streamedUsage(reader: Pick<AnswerReader, "promptTokens" | "tokens" | "tokensCounted" | "textEvents">, bodyBytes: number): AnswerUsage {
  const counted = reader.tokensCounted && reader.promptTokens !== undefined;
  return {
    promptTokens: reader.promptTokens ?? estimatedPromptTokens(bodyBytes),
    completionTokens: reader.tokensCounted ? reader.tokens : reader.textEvents,
    estimated: !counted,
  };
}

/** The most of a whole (not streamed) answer that is read for its usage; a larger one is estimated. */
export const USAGE_ANSWER_BYTES = 1024 * 1024;

/**
 * A whole completion's usage from its JSON (`usage.prompt_tokens`, `usage.completion_tokens`);
 * `answer` undefined when it was not read whole (cut, too large). Without usage the prompt is
 * estimated, and the completion as its choices' text / 4.
 */
export function wholeAnswerUsage(answer: Buffer | undefined, bodyBytes: number): AnswerUsage {
  let json: unknown;
  try {
    json = answer === undefined ? undefined : JSON.parse(answer.toString("utf8"));
  } catch {
    json = undefined;
  }
  const usage = field(json, "usage");
  const prompt = field(usage, "prompt_tokens");
  const completion = field(usage, "completion_tokens");
  if (isCount(prompt) && isCount(completion)) return { promptTokens: prompt, completionTokens: completion, estimated: false };
  return { promptTokens: estimatedPromptTokens(bodyBytes), completionTokens: Math.ceil(choicesText(json) / 4), estimated: true };
}

function field(value: unknown, name: string): unknown {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>)[name] : undefined;
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** Characters of text in a completion's choices (chat `message.content`, completions `text`). */
function choicesText(json: unknown): number {
  const choices = field(json, "choices");
  if (!Array.isArray(choices)) return 0;
  let chars = 0;
  for (const choice of choices) {
    const text = field(choice, "text") ?? field(field(choice, "message"), "content");
    if (typeof text === "string") chars += text.length;
  }
  return chars;
}
