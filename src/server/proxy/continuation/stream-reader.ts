import { StringDecoder } from "node:string_decoder";
import type { ChunkScan, Span } from "./chunk-fields.js";
import { scanChunk } from "./chunk-scan.js";

// The reader of one streamed answer (SPEC.md section 2, "Answers that survive their replica"), fed
// the replicas' bytes as they arrive, split anywhere (inside a UTF-8 character, a `data:` line).
// It finds the server-sent events' ends and keeps only what continuation needs: the answer's `id`,
// `created` and `model`, per choice the text passed on, whether it reasoned and its
// `finish_reason`, the tokens passed on as the replicas count them (vLLM's continuous usage
// stats), whether `data: [DONE]` came, and a replica's error event. What it returns is what the
// caller may be sent: whole events only (a cut replica's half event is never passed on, nor a
// replica's error event and what follows it, its `[DONE]` included: that is a cut too), and, where
// continuation needs it, changed: usage the caller did not ask for cut out, a continuation's
// `id`/`created`/`model` made the first answer's and its opening role chunk dropped, the
// replicas' usage chunks replaced by one for the whole answer. Only the chunk's structure is
// scanned (chunk-scan.ts), never built as objects.

/** The usage the caller asked for: none, one final chunk (include_usage), or on every chunk too. */
export type UsageAsked = "none" | "final" | "continuous";

export interface AnswerReaderOptions {
  path: "chat" | "completions";
  usage: UsageAsked;
  /** The answer's choices (`n`), 1 unless the caller asked more. */
  choices?: number;
}

export interface ChoiceSoFar {
  /** The text passed on (its content; not its reasoning), while the reader keeps text. */
  text: string;
  /** Reasoning text (`reasoning_content` / `reasoning` deltas) was passed on. */
  reasoned: boolean;
  /** Its finish reason once one came. */
  finishReason: string | null;
}

const LF = 10;
const CR = 13;

export class AnswerReader {
  /** The first answer's `id`, `created` and `model` as the replica wrote them (JSON), once seen. */
  id: string | undefined;
  created: string | undefined;
  model: string | undefined;
  readonly choices: ChoiceSoFar[];
  /** `data: [DONE]` came. */
  done = false;
  /** This replica's error event's message, once one came: nothing of this replica is passed on after it. */
  error: string | undefined;
  /** Whether the choices' text is kept (for a continuation); when not, `text` stays empty. */
  keepText = true;
  /** UTF-8 bytes of the text kept, all choices. */
  textBytes = 0;
  /** Events whose JSON could not be read (passed on as they came; the text so far is then unsure). */
  unreadable = 0;
  /** The caller's prompt tokens, as the first replica counted them. */
  promptTokens: number | undefined;
  /** Events passed on that carried text: the completion tokens' estimate when a replica did not count them. */
  textEvents = 0;

  private readonly options: Required<AnswerReaderOptions>;
  private decoder = new StringDecoder("utf8");
  private pending = "";
  private searchFrom = 0;
  private replicas = 0;
  /** Tokens passed on by the replicas before this one, and by this one per choice. */
  private tokensBefore = 0;
  private replicaTokens: number[] = [];
  private replicaTotal = 0;
  private uncounted = false;
  private replicaPassedText = false;
  private replicaCounted = false;
  /** This replica sent a `data:` event other than its opening role chunk. */
  private replicaStarted = false;
  /** This replica was asked the caller's own prompt (nothing passed on before it): its prompt_tokens are the caller's. */
  private ownPrompt = true;
  /** The answer's opening role chunk reached the caller. */
  private rolePassed = false;

  constructor(options: AnswerReaderOptions) {
    this.options = { choices: 1, ...options };
    this.choices = Array.from({ length: this.options.choices }, () => ({ text: "", reasoned: false, finishReason: null }));
  }

  /** Begins a replica's answer: the first, or a continuation of what was passed on. Drops the last one's half event. */
  startReplica(): void {
    if (this.replicas > 0) {
      this.tokensBefore = this.tokens;
      if (this.replicaPassedText && !this.replicaCounted) this.uncounted = true;
    }
    this.replicas += 1;
    this.decoder = new StringDecoder("utf8");
    this.pending = "";
    this.searchFrom = 0;
    this.replicaTokens = [];
    this.replicaTotal = 0;
    this.replicaPassedText = false;
    this.replicaCounted = false;
    this.replicaStarted = false;
    this.error = undefined;
    // A continuation with no text before it is the caller's request again (continuation-request.ts).
    this.ownPrompt = this.choices.every((c) => c.text === "");
  }

  /** The current replica sent its first `data:` event other than its opening role chunk (its headers alone are not a start either). */
  get started(): boolean {
    return this.replicaStarted;
  }

  /** Stops keeping the text (no continuation will need it) and forgets what was kept. */
  dropText(): void {
    this.keepText = false;
    this.textBytes = 0;
    for (const choice of this.choices) choice.text = "";
  }

  /** The completion tokens passed on, whole answer (all choices). */
  get tokens(): number {
    return this.tokensBefore + Math.max(this.replicaTotal, this.replicaTokens.reduce((sum, n) => sum + (n ?? 0), 0));
  }

  /** Every replica that passed text on counted its tokens (so `tokens` is exact). */
  get tokensCounted(): boolean {
    return !this.uncounted && (this.replicaCounted || !this.replicaPassedText);
  }

  /** Every choice carries its finish reason: nothing is left to continue. */
  get finished(): boolean {
    return this.choices.every((c) => c.finishReason !== null);
  }

  /** The replica's bytes as they came; returns what to pass on to the caller now (maybe ""). */
  push(bytes: Uint8Array): string {
    if (this.replicas === 0) this.startReplica();
    const s = this.pending + this.decoder.write(bytes as Buffer);
    let out = "";
    let start = 0;
    let from = this.searchFrom;
    for (;;) {
      const nl = s.indexOf("\n", from);
      if (nl < 0) {
        from = s.length;
        break;
      }
      const next = s.charCodeAt(nl + 1);
      if (nl + 1 === s.length || (next === CR && nl + 2 === s.length)) {
        from = nl; // the line after it has not come yet: is it blank?
        break;
      }
      const end = next === LF ? nl + 2 : next === CR && s.charCodeAt(nl + 2) === LF ? nl + 3 : -1;
      if (end < 0) {
        from = nl + 1;
        continue;
      }
      out += this.event(s.slice(start, end));
      start = end;
      from = end;
    }
    this.pending = start === 0 ? s : s.slice(start);
    this.searchFrom = from - start;
    return out;
  }

  /** The end of an answer the proxy finishes itself: its usage chunk (when asked) and `[DONE]`. */
  finish(): string {
    this.done = true;
    return this.usageChunk() + "data: [DONE]\n\n";
  }

  /** One whole event (its blank line included) as it is to be passed on. */
  private event(raw: string): string {
    // After a replica's error event, its [DONE] is not the answer's end: nothing more is passed on.
    if (this.error !== undefined) return "";
    const data = eventData(raw);
    if (data === undefined) return raw;
    const scan = data === "[DONE]" ? undefined : scanChunk(data);
    // Any event starts the replica's answer but its opening role chunk, which some servers send
    // with their headers, long before the model's first token.
    if (!isOpening(scan)) this.replicaStarted = true;
    if (data === "[DONE]") return this.finish();
    if (scan === undefined) {
      this.unreadable += 1;
      return raw;
    }
    if (scan.error) {
      this.error = errorMessage(data);
      return "";
    }
    const continuation = this.replicas > 1;
    if (this.id === undefined) {
      this.id = at(data, scan.id);
      this.created = at(data, scan.created);
      this.model = at(data, scan.model);
    }
    this.count(scan);
    const choices = scan.choices ?? [];
    if (choices.length === 0 && scan.usageValue !== undefined) return ""; // a replica's usage chunk: ours comes at the end
    const roleOnly = choices.length > 0 && choices.every((c) => c.role && !c.text && !c.finishReason);
    if (roleOnly && this.rolePassed) return ""; // a continuation's opening chunk: the caller has its role
    if (roleOnly) this.rolePassed = true;
    if (choices.some((choice) => choice.text)) this.textEvents += 1;
    for (const choice of choices) {
      const soFar = this.choices[choice.index];
      if (soFar === undefined) continue;
      if (choice.text) {
        if (this.keepText) {
          soFar.text += choice.text;
          this.textBytes += Buffer.byteLength(choice.text);
        }
        this.replicaPassedText = true;
      }
      if (choice.reasoningContent || choice.reasoning) soFar.reasoned = true;
      if (choice.finishReason) soFar.finishReason = choice.finishReason;
    }
    const edits = this.edits(data, scan, continuation);
    if (edits.length === 0 && raw.indexOf("\n") >= raw.length - 3) return raw;
    return `data: ${applied(data, edits)}\n\n`;
  }

  /** Keeps the tokens and prompt tokens this chunk's usage reports. */
  private count(scan: ChunkScan): void {
    if (scan.completionTokens === undefined) return;
    this.replicaCounted = true;
    if (this.ownPrompt && scan.promptTokens !== undefined) this.promptTokens ??= scan.promptTokens;
    const choices = scan.choices ?? [];
    if (choices.length === 0) this.replicaTotal = scan.completionTokens;
    for (const choice of choices) this.replicaTokens[choice.index] = scan.completionTokens;
  }

  /** What changes in a chunk before the caller sees it. */
  private edits(data: string, scan: ChunkScan, continuation: boolean): Edit[] {
    const edits: Edit[] = [];
    if (continuation) {
      replace(edits, data, scan.id, this.id);
      replace(edits, data, scan.created, this.created);
      replace(edits, data, scan.model, this.model);
    }
    const member = scan.usageMember;
    const value = scan.usageValue;
    if (member !== undefined && value !== undefined) {
      if (this.options.usage !== "continuous") edits.push({ start: member.start, end: member.end, text: "" });
      else if (continuation) edits.push({ start: value.start, end: value.end, text: this.usageJson() });
    }
    if (edits.length > 1) edits.sort((a, b) => a.start - b.start);
    return edits;
  }

  private usageChunk(): string {
    if (this.options.usage === "none" || this.id === undefined) return "";
    const object = this.options.path === "chat" ? "chat.completion.chunk" : "text_completion";
    return `data: {"id":${this.id},"object":"${object}","created":${this.created ?? 0},"model":${this.model ?? '""'},"choices":[],"usage":${this.usageJson()}}\n\n`;
  }

  /** Usage for the whole answer so far: the caller's prompt, every token passed on. */
  private usageJson(): string {
    const prompt = this.promptTokens ?? 0;
    const completion = this.tokens;
    return `{"prompt_tokens":${prompt},"total_tokens":${prompt + completion},"completion_tokens":${completion}}`;
  }
}

interface Edit extends Span {
  text: string;
}

/** Replaces the value at `span` with `value` unless it is that already. */
function replace(edits: Edit[], data: string, span: Span | undefined, value: string | undefined): void {
  if (span === undefined || value === undefined) return;
  if (span.end - span.start === value.length && data.startsWith(value, span.start)) return;
  edits.push({ start: span.start, end: span.end, text: value });
}

function applied(data: string, edits: Edit[]): string {
  let out = "";
  let at = 0;
  for (const edit of edits) {
    out += data.slice(at, edit.start) + edit.text;
    at = edit.end;
  }
  return out + data.slice(at);
}

function at(data: string, span: Span | undefined): string | undefined {
  return span === undefined ? undefined : data.slice(span.start, span.end);
}

/** A chunk that only opens the answer: every choice's role, and no text, reasoning or finish yet. */
function isOpening(scan: ChunkScan | undefined): boolean {
  const choices = scan?.choices;
  return choices !== undefined && choices.length > 0 && choices.every((c) => c.role && !c.text && !c.reasoningContent && !c.reasoning && !c.finishReason);
}

/** The message of a replica's error event (`{"error": {"message": ...}}`, or vLLM's older `{"object": "error", "message": ...}`). */
function errorMessage(data: string): string {
  try {
    const json = JSON.parse(data) as { error?: unknown; message?: unknown };
    const inner = typeof json.error === "object" && json.error !== null ? (json.error as { message?: unknown }).message : json.error;
    const message = inner ?? json.message;
    if (typeof message === "string" && message !== "") return message;
  } catch {
    // Not JSON after all: its text names the error.
  }
  return data.length > 300 ? `${data.slice(0, 300)}...` : data;
}

/**
 * The event's data (its `data:` lines, one space after the colon dropped), or undefined for an
 * event without data (a comment such as `: ping`). Data spread over several lines is joined onto
 * one with spaces: in JSON a newline is only ever space between tokens.
 */
function eventData(raw: string): string | undefined {
  const firstEnd = raw.indexOf("\n");
  if (raw.startsWith("data: ") && firstEnd >= raw.length - 3) return raw.slice(6, raw.charCodeAt(firstEnd - 1) === CR ? firstEnd - 1 : firstEnd);
  const lines = raw.split(/\r?\n/).filter((line) => line.startsWith("data:"));
  if (lines.length === 0) return undefined;
  return lines.map((line) => line.slice(line.startsWith("data: ") ? 6 : 5)).join(" ");
}
