// What the simulated model writes, and where it carries on when asked to continue. The answer
// names the machine that began it ("Hello from instance X, serving M. This answer is simulated.")
// and, when `max_tokens` asks for more, goes on with numbered tokens (№11 №12 ...: a character of
// three bytes in UTF-8, so a stream cut anywhere tests its readers) up to exactly that many. A
// continuation (vLLM's `continue_final_message`, or a completions prompt that ends with the start of
// an answer) finds the answer begun in its text, parses the instance named there, and writes the
// SAME text from where it stopped, so a cut answer continued on another machine equals the uncut
// one character for character.

/** The sentence every answer opens with; an answer is at least this long (10 tokens). */
function sentence(instance: string, model: string): string {
  return `Hello from instance ${instance}, serving ${model}. This answer is simulated.`;
}

const OPENING = "Hello from instance ";

/** The text's tokens as the simulated model counts them: each word with the space before it. */
export function simulatedTokens(text: string): string[] {
  return text.match(/\s*\S+/g) ?? [];
}

/**
 * The whole answer of `length` tokens begun on `instance` (at least the sentence): the sentence,
 * then numbered tokens up to `length`.
 */
function answerText(instance: string, model: string, length: number): string {
  let text = sentence(instance, model);
  for (let i = simulatedTokens(text).length + 1; i <= length; i++) text += ` №${i}`;
  return text;
}

/**
 * The tokens a request writes (before its `max_tokens` cut) after `prefix` (the final assistant message it continues, or its
 * completions prompt; "" for a fresh answer): the rest of the answer begun in `prefix`, or a whole
 * answer of this machine when `prefix` holds no answer's beginning. `maxTokens` (when the caller
 * gave one) makes the whole answer, what `prefix` already holds included, that many tokens long.
 */
export function plannedAnswer(prefix: string, own: { instance: string; model: string }, maxTokens: number | undefined): string[] {
  const begun = answerBegun(prefix);
  if (begun !== undefined) {
    const instance = /^Hello from instance ([^\s,]+),/.exec(begun)?.[1] ?? own.instance;
    const done = simulatedTokens(begun).length;
    const whole = answerText(instance, own.model, Math.max(done, maxTokens === undefined ? 0 : done + maxTokens));
    if (whole.startsWith(begun)) return simulatedTokens(whole.slice(begun.length));
  }
  return simulatedTokens(answerText(own.instance, own.model, maxTokens ?? 0));
}

/** The end of `prefix` that begins an answer ("Hello", "Hello from instance m-1, serving"...). */
function answerBegun(prefix: string): string | undefined {
  for (let at = prefix.lastIndexOf("Hello"); at >= 0; at = at === 0 ? -1 : prefix.lastIndexOf("Hello", at - 1)) {
    const tail = prefix.slice(at);
    if (tail.startsWith(OPENING) || OPENING.startsWith(tail)) return tail;
  }
  return undefined;
}
