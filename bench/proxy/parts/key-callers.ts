// bench:keys's callers against one key on several service processes: each caller sends one-token
// chat completions one after another until the deadline and records every answer (its start,
// the usage the replica counted) and every refusal (its code). A refused caller waits 1 s, the
// least a refusal's Retry-After says (whole seconds), so that it keeps asking without spinning on
// refusals.
import { Agent } from "node:http";
import { timedCall, type Route } from "./http-timing.js";

const REFUSED_WAIT_MS = 1000;

export interface Answered {
  /** ms since the run started. */
  at: number;
  promptTokens: number;
  completionTokens: number;
}

export interface CallerFigures {
  answered: Answered[];
  refused: Record<string, number>;
  /** ms since the run started of the first refusal; undefined when none. */
  firstRefusalAt?: number;
  /** Answers that were neither 200 nor 429, or calls that failed. */
  errors: number;
  lastError?: string;
}

/** `callers` callers on `route` for `durationMs`, the run's clock starting at `startedAt` (Date.now()). */
export async function runCallers(route: Route, body: string, callers: number, startedAt: number, durationMs: number): Promise<CallerFigures> {
  const agent = new Agent({ keepAlive: true, maxSockets: callers });
  const figures: CallerFigures = { answered: [], refused: {}, errors: 0 };
  const caller = async () => {
    while (Date.now() - startedAt < durationMs) {
      const at = Date.now() - startedAt;
      try {
        const answer = await timedCall(agent, route, body);
        if (answer.status === 200) {
          const usage = (JSON.parse(answer.text) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
          figures.answered.push({ at, promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens });
        } else if (answer.status === 429) {
          const code = (JSON.parse(answer.text) as { error: { code: string } }).error.code;
          figures.refused[code] = (figures.refused[code] ?? 0) + 1;
          figures.firstRefusalAt ??= at;
          await new Promise((resolve) => setTimeout(resolve, REFUSED_WAIT_MS));
        } else {
          figures.errors++;
          figures.lastError = `${answer.status}: ${answer.text.slice(0, 200)}`;
        }
      } catch (err) {
        figures.errors++;
        figures.lastError = String(err);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  await Promise.all(Array.from({ length: callers }, caller));
  agent.destroy();
  return figures;
}
