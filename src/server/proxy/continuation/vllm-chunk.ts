import type { ChoiceScan, ChunkScan } from "./chunk-fields.js";
import { stringEnd, stringValue, textAt } from "./json-cursor.js";

// The fast path of the chunk reader: a streamed chunk laid out exactly as vLLM writes it (pydantic's
// `model_dump_json(exclude_unset=True)` of its chunk models: no spaces, members in the models'
// order), read as a run of expected literals, with no general JSON walk:
//
//   {"id":S,"object":S,"created":N,"model":S,"choices":[C,...](,"usage":(null|U))?}
//   C (chat)        {"index":N,"delta":{D}(,"logprobs":null)?(,"finish_reason":(null|S))?(,"stop_reason":(null|S|N))?}
//   C (completions) {"index":N,"text":S,(same tail)}
//   D               "role", "content", "reasoning_content", "reasoning" (string or null), any order
//   U               {"prompt_tokens":N,"total_tokens":N,"completion_tokens":N}
//
// Anything else (tool-call deltas, logprobs, prompt_tokens_details, spaces, other members, another
// order, text after the object) returns undefined, and the caller reads the chunk with the full scan
// (chunk-scan.ts). What this returns is what the full scan returns for the same text.

const QUOTE = 34;
const COMMA = 44;
const CLOSE_BRACE = 125;
const CLOSE_BRACKET = 93;

// Literals met in a row in nearly every chunk, compared at once: each comparison costs a call.
const CHAT_OBJECT = ',"object":"chat.completion.chunk","created":';
const COMPLETION_OBJECT = ',"object":"text_completion","created":';
const USAGE_OPEN = ',"usage":{"prompt_tokens":';
const CHOICE_GOES_ON = ',"logprobs":null,"finish_reason":null}';

/** The chunk's fields when it is laid out as vLLM writes it, else undefined. */
export function readVllmChunk(s: string): ChunkScan | undefined {
  if (!textAt(s, 0, '{"id":"')) return undefined;
  const idEnd = stringEnd(s, 6);
  if (idEnd < 0) return undefined;
  let createdStart: number;
  if (textAt(s, idEnd, CHAT_OBJECT)) createdStart = idEnd + CHAT_OBJECT.length;
  else if (textAt(s, idEnd, COMPLETION_OBJECT)) createdStart = idEnd + COMPLETION_OBJECT.length;
  else {
    if (!textAt(s, idEnd, ',"object":"')) return undefined;
    const objectEnd = stringEnd(s, idEnd + 10);
    if (objectEnd < 0 || !textAt(s, objectEnd, ',"created":')) return undefined;
    if (objectEnd - idEnd === 17 && textAt(s, idEnd + 10, '"error"')) return undefined; // an error event
    createdStart = objectEnd + 11;
  }
  const createdEnd = digitsEnd(s, createdStart);
  if (createdEnd < 0 || !textAt(s, createdEnd, ',"model":"')) return undefined;
  const modelEnd = stringEnd(s, createdEnd + 9);
  if (modelEnd < 0 || !textAt(s, modelEnd, ',"choices":[')) return undefined;
  const choices: ChoiceScan[] = [];
  let i = modelEnd + 12;
  if (s.charCodeAt(i) === CLOSE_BRACKET) i += 1;
  else {
    for (;;) {
      i = readChoice(s, i, choices);
      if (i < 0) return undefined;
      const c = s.charCodeAt(i++);
      if (c === CLOSE_BRACKET) break;
      if (c !== COMMA) return undefined;
    }
  }
  const scan: ChunkScan = {
    id: { start: 6, end: idEnd },
    created: { start: createdStart, end: createdEnd },
    model: { start: createdEnd + 9, end: modelEnd },
    choices,
    usageMember: undefined,
    usageValue: undefined,
    promptTokens: undefined,
    completionTokens: undefined,
    error: false,
  };
  const last = s.length - 1;
  if (i === last && s.charCodeAt(i) === CLOSE_BRACE) return scan;
  const start = i + 9; // after ',"usage":'
  let end: number;
  if (textAt(s, i, USAGE_OPEN)) {
    const promptStart = i + USAGE_OPEN.length;
    const promptEnd = digitsEnd(s, promptStart);
    if (promptEnd < 0 || !textAt(s, promptEnd, ',"total_tokens":')) return undefined;
    const totalEnd = digitsEnd(s, promptEnd + 16);
    if (totalEnd < 0 || !textAt(s, totalEnd, ',"completion_tokens":')) return undefined;
    const completionEnd = digitsEnd(s, totalEnd + 21);
    if (completionEnd < 0 || s.charCodeAt(completionEnd) !== CLOSE_BRACE) return undefined;
    end = completionEnd + 1;
    scan.promptTokens = digitsValue(s, promptStart, promptEnd);
    scan.completionTokens = digitsValue(s, totalEnd + 21, completionEnd);
  } else if (textAt(s, i, ',"usage":null')) end = start + 4;
  else return undefined;
  if (end !== last || s.charCodeAt(end) !== CLOSE_BRACE) return undefined;
  scan.usageValue = { start, end };
  scan.usageMember = { start: i, end };
  return scan;
}

/** Reads one choice at `i` into `choices`; returns the index after it, or -1 when it is laid out otherwise. */
function readChoice(s: string, i: number, choices: ChoiceScan[]): number {
  if (!textAt(s, i, '{"index":')) return -1;
  const indexEnd = digitsEnd(s, i + 9);
  if (indexEnd < 0) return -1;
  const choice: ChoiceScan = { index: digitsValue(s, i + 9, indexEnd), text: undefined, reasoningContent: undefined, reasoning: undefined, role: false, finishReason: undefined };
  if (textAt(s, indexEnd, ',"delta":{')) i = readDelta(s, indexEnd + 10, choice);
  else if (textAt(s, indexEnd, ',"text":"')) {
    const end = stringEnd(s, indexEnd + 8);
    if (end < 0) return -1;
    choice.text = stringValue(s, { start: indexEnd + 8, end });
    i = end;
  } else return -1;
  if (i < 0) return -1;
  if (textAt(s, i, CHOICE_GOES_ON)) {
    choice.finishReason = null;
    choices.push(choice);
    return i + CHOICE_GOES_ON.length;
  }
  if (textAt(s, i, ',"logprobs":null')) i += 16;
  if (textAt(s, i, ',"finish_reason":')) {
    i += 17;
    if (textAt(s, i, "null")) {
      choice.finishReason = null;
      i += 4;
    } else {
      const end = s.charCodeAt(i) === QUOTE ? stringEnd(s, i) : -1;
      if (end < 0) return -1;
      choice.finishReason = stringValue(s, { start: i, end });
      i = end;
    }
  }
  if (textAt(s, i, ',"stop_reason":')) {
    i += 15;
    if (textAt(s, i, "null")) i += 4;
    else i = s.charCodeAt(i) === QUOTE ? stringEnd(s, i) : digitsEnd(s, i);
    if (i < 0) return -1;
  }
  if (s.charCodeAt(i) !== CLOSE_BRACE) return -1;
  choices.push(choice);
  return i + 1;
}

/** Reads a delta's members from `i` (just inside its brace); returns the index after its closing brace, or -1. */
function readDelta(s: string, i: number, choice: ChoiceScan): number {
  if (s.charCodeAt(i) === CLOSE_BRACE) return i + 1;
  for (;;) {
    let field: number;
    if (textAt(s, i, '"content":')) field = CONTENT;
    else if (textAt(s, i, '"role":"')) field = ROLE;
    else if (textAt(s, i, '"reasoning_content":')) field = REASONING_CONTENT;
    else if (textAt(s, i, '"reasoning":')) field = REASONING;
    else return -1;
    const start = i + KEY_LENGTH[field]!;
    let end: number;
    let value: string | undefined;
    if (s.charCodeAt(start) === QUOTE) {
      end = stringEnd(s, start);
      if (end < 0) return -1;
      value = field === ROLE ? undefined : stringValue(s, { start, end });
    } else if (field !== ROLE && textAt(s, start, "null")) end = start + 4;
    else return -1;
    if (field === CONTENT) choice.text = value;
    else if (field === ROLE) choice.role = true;
    else if (field === REASONING_CONTENT) choice.reasoningContent = value;
    else choice.reasoning = value;
    const c = s.charCodeAt(end);
    if (c === CLOSE_BRACE) return end + 1;
    if (c !== COMMA) return -1;
    i = end + 1;
  }
}

// The delta members kept.
const CONTENT = 0;
const ROLE = 1;
const REASONING_CONTENT = 2;
const REASONING = 3;
/** Each member's key with its quotes and colon. */
const KEY_LENGTH = [10, 7, 20, 12];

/** The index after the digits at `i` (at least one), or -1. */
function digitsEnd(s: string, i: number): number {
  let j = i;
  for (let c = s.charCodeAt(j); c >= 48 && c <= 57; c = s.charCodeAt(++j));
  return j > i ? j : -1;
}

function digitsValue(s: string, start: number, end: number): number {
  let n = 0;
  for (let i = start; i < end; i++) n = n * 10 + s.charCodeAt(i) - 48;
  return n;
}
