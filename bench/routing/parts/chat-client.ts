// bench:routing's caller: streamed chat completions through an endpoint, each timed to its first
// token (the first event that carries text, not the role chunk a server sends with its headers),
// the replica that answered (x-endpoint-instance) and the answer's text (the next turn resends it).
// Loops of callers run a bounded list of jobs, each loop one request at a time.
import { Agent, request } from "node:http";
import type { Message } from "./workloads.js";

export interface Answer {
  ok: boolean;
  /** From the request to the first token, ms. */
  ttftMs: number;
  instance: string;
  text: string;
}

export interface ChatTarget {
  port: number;
  /** The endpoint's name. */
  endpoint: string;
}

const FIRST_TOKEN = /"delta":\{"content":"[^"]/;

export function createChatClient(target: ChatTarget, inFlight: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: inFlight });
  const ask = (messages: Message[], maxTokens: number): Promise<Answer> =>
    new Promise((resolve) => {
      const started = performance.now();
      const failed = () => resolve({ ok: false, ttftMs: performance.now() - started, instance: "", text: "" });
      const body = JSON.stringify({ messages, max_tokens: maxTokens, stream: true });
      const req = request(
        { agent, host: "127.0.0.1", port: target.port, path: `/endpoints/${target.endpoint}/v1/chat/completions`, method: "POST", headers: { "content-type": "application/json" } },
        (res) => {
          let raw = "";
          let ttftMs: number | undefined;
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            raw += chunk;
            if (ttftMs === undefined && FIRST_TOKEN.test(raw)) ttftMs = performance.now() - started;
          });
          res.once("error", failed);
          res.once("end", () => {
            const complete = res.statusCode === 200 && raw.endsWith("data: [DONE]\n\n") && ttftMs !== undefined;
            if (!complete) return failed();
            resolve({ ok: true, ttftMs: ttftMs!, instance: String(res.headers["x-endpoint-instance"] ?? "?"), text: answerText(raw) });
          });
        },
      );
      req.once("error", failed);
      req.end(body);
    });
  return { ask, close: () => agent.destroy() };
}

/** The streamed answer's text, its deltas joined. */
function answerText(raw: string): string {
  return raw
    .split("\n\n")
    .filter((event) => event.startsWith("data: {"))
    .map((event) => (JSON.parse(event.slice(6)) as { choices: Array<{ delta?: { content?: string } }> }).choices[0]?.delta?.content ?? "")
    .join("");
}

/** Runs `jobs` on `loops` loops, each job awaited before its loop takes the next. */
export async function runLoops<T>(jobs: T[], loops: number, run: (job: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: loops }, async () => {
      while (next < jobs.length) await run(jobs[next++]!);
    }),
  );
}
