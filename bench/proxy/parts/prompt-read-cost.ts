// bench:proxy's micro-bench of reading a prompt's blocks (SPEC.md section 2, "Requests that share a
// prompt go where it is cached"), in the bench's own process: microseconds per KB of body, median
// of interleaved rounds, for what the proxy does per request routed by prefix. From the raw bytes
// (raw-prompt.ts: no key's admission; a streamed body is parsed for its plan besides) and by
// parsing it (a key's admission, or a body the raw reader gives up on), for an ASCII prompt and
// for one of Korean text; and from the raw bytes when the same messages were read before (the
// recent messages, as the proxy reads a conversation's next turn or a shared system prompt).
import { RecentMessages } from "../../../src/server/prefix-index/recent-messages.js";
import { readCompletion } from "../../../src/server/proxy/completion-body.js";

const ROUNDS = 9;
const CALLS = 2_000;

export interface PromptReadCost {
  label: string;
  bodyBytes: number;
  /** µs per KB of body, median of ROUNDS. */
  usPerKb: number;
}

export function measurePromptRead(model: string, system: string): PromptReadCost[] {
  const korean = `당신은 쇼핑몰의 상담원입니다. 두 문장으로 답하세요. ${"정책을 지키세요. ".repeat(200)}`;
  const body = (content: string, extra: object = {}) => Buffer.from(JSON.stringify({ model, messages: [{ role: "system", content }, { role: "user", content: "Where is my order?" }], max_tokens: 1, ...extra }));
  const cases: Array<{ label: string; bytes: Buffer; maxTokens: boolean; recentMessages?: RecentMessages }> = [
    { label: "ASCII prompt, from the raw bytes", bytes: body(system), maxTokens: false },
    { label: "ASCII prompt, its messages read before", bytes: body(system), maxTokens: false, recentMessages: new RecentMessages(16_384) },
    { label: "ASCII prompt, parsed (a key's admission)", bytes: body(system), maxTokens: true },
    { label: "Korean prompt, from the raw bytes", bytes: body(korean), maxTokens: false },
    { label: "Korean prompt, parsed", bytes: body(korean), maxTokens: true },
  ];
  const times = cases.map(() => [] as number[]);
  for (let round = 0; round < ROUNDS; round++) {
    cases.forEach(({ bytes, maxTokens, recentMessages }, i) => {
      const started = process.hrtime.bigint();
      for (let call = 0; call < CALLS; call++) readCompletion("chat", bytes, { promptBlocks: 16_384, maxTokens, recentMessages });
      times[i]!.push(Number(process.hrtime.bigint() - started) / 1e3 / CALLS / (bytes.length / 1024));
    });
  }
  return cases.map(({ label, bytes }, i) => ({ label, bodyBytes: bytes.length, usPerKb: times[i]!.sort((a, b) => a - b)[ROUNDS >> 1]! }));
}
