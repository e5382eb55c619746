import type { ChoiceScan, ChunkScan } from "./chunk-fields.js";
import { skipSpace, skipValue, stringEnd, stringValue, textAt } from "./json-cursor.js";
import { readVllmChunk } from "./vllm-chunk.js";

// A streamed chunk's JSON (`{"id":...,"choices":[...],"usage":{...}}`) read for the few fields
// continuation needs, without building it as objects. A chunk laid out as vLLM writes it takes the
// fast path (vllm-chunk.ts); any other goes through the full scan below: each key is found with one indexOf
// for its closing quote and told by its length, values not kept are jumped over (strings with
// indexOf again), and a string is decoded only when it is a field kept. No callbacks, and nothing
// allocated but the kept fields: this runs for every chunk of every streamed answer.

// Character codes, kept in this module: imported constants are function calls under tsx.
const QUOTE = 34;
const COMMA = 44;
const COLON = 58;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;
const OPEN_BRACKET = 91;
const CLOSE_BRACKET = 93;

/** What a chunk holds, or undefined when it is not a JSON object. */
export function scanChunk(s: string): ChunkScan | undefined {
  try {
    return readVllmChunk(s) ?? scanChunkFully(s);
  } catch {
    return undefined; // a string kept holds a bad escape: JSON.parse, decoding it, threw
  }
}

/**
 * The full scan: what any chunk holds, whatever its layout, or undefined when it is not a JSON
 * object. Throws a SyntaxError when a string it keeps holds a bad escape (as the fast path does).
 */
export function scanChunkFully(s: string): ChunkScan | undefined {
  // Every field set at once, in one order: one shape for every chunk keeps the reader's reads fast.
  const scan: ChunkScan = {
    id: undefined,
    created: undefined,
    model: undefined,
    choices: undefined,
    usageMember: undefined,
    usageValue: undefined,
    promptTokens: undefined,
    completionTokens: undefined,
    error: false,
  };
  let i = skipSpace(s, 0);
  if (s.charCodeAt(i) !== OPEN_BRACE) return undefined;
  i = skipSpace(s, i + 1);
  if (s.charCodeAt(i) === CLOSE_BRACE) return scan;
  let previousEnd = -1;
  for (;;) {
    const keyEnd = keyEndAt(s, i);
    const start = valueAfter(s, keyEnd);
    if (start < 0) return undefined;
    const key = keyEnd - i;
    let end: number;
    if (key === 9 && textAt(s, i, '"choices"')) {
      scan.choices = [];
      end = readChoices(s, start, scan.choices);
    } else if (key === 7 && textAt(s, i, '"usage"')) {
      end = readFields(s, start, USAGE, undefined, scan);
      scan.usageValue = { start, end };
    } else end = skipValue(s, start);
    if (end < 0) return undefined;
    if (key === 4 && textAt(s, i, '"id"')) scan.id = { start, end };
    else if (key === 9 && textAt(s, i, '"created"')) scan.created = { start, end };
    else if (key === 7 && textAt(s, i, '"model"')) scan.model = { start, end };
    else if (key === 7 && textAt(s, i, '"error"')) scan.error = true;
    else if (key === 8 && textAt(s, i, '"object"') && textAt(s, start, '"error"')) scan.error = true;
    const after = skipSpace(s, end);
    const closed = s.charCodeAt(after) === CLOSE_BRACE;
    if (!closed && s.charCodeAt(after) !== COMMA) return undefined;
    if (scan.usageValue?.end === end) {
      // The usage member with the comma joining it to its neighbour, to be cut out whole.
      scan.usageMember = previousEnd >= 0 ? { start: previousEnd, end } : { start: i, end: closed ? end : skipSpace(s, after + 1) };
    }
    if (closed) return scan;
    previousEnd = end;
    i = skipSpace(s, after + 1);
  }
}

/** Reads the choices array at `i` into `choices`; returns the index after it, or -1. */
function readChoices(s: string, i: number, choices: ChoiceScan[]): number {
  if (s.charCodeAt(i) !== OPEN_BRACKET) return skipValue(s, i);
  i = skipSpace(s, i + 1);
  if (s.charCodeAt(i) === CLOSE_BRACKET) return i + 1;
  for (;;) {
    const choice: ChoiceScan = { index: choices.length, text: undefined, reasoningContent: undefined, reasoning: undefined, role: false, finishReason: undefined };
    const end = readFields(s, i, CHOICE, choice, undefined);
    if (end < 0) return -1;
    choices.push(choice);
    i = skipSpace(s, end);
    if (s.charCodeAt(i) === CLOSE_BRACKET) return i + 1;
    if (s.charCodeAt(i) !== COMMA) return -1;
    i = skipSpace(s, i + 1);
  }
}

// Which object readFields is in: the fields it keeps differ, the walk does not.
const CHOICE = 0;
const DELTA = 1;
const USAGE = 2;

/**
 * Reads the fields kept of a choice (index, text, finish reason; its delta's content, reasoning and role) or
 * of usage (prompt and completion tokens). Returns the index after the object (after any other
 * value, `null` included, for a delta or usage), or -1.
 */
function readFields(s: string, i: number, inside: number, choice: ChoiceScan | undefined, scan: ChunkScan | undefined): number {
  if (s.charCodeAt(i) !== OPEN_BRACE) return inside === CHOICE ? -1 : skipValue(s, i);
  i = skipSpace(s, i + 1);
  if (s.charCodeAt(i) === CLOSE_BRACE) return i + 1;
  for (;;) {
    const keyEnd = keyEndAt(s, i);
    const start = valueAfter(s, keyEnd);
    if (start < 0) return -1;
    const key = keyEnd - i;
    const end = inside === CHOICE && key === 7 && textAt(s, i, '"delta"') ? readFields(s, start, DELTA, choice, scan) : skipValue(s, start);
    if (end < 0) return -1;
    if (inside === CHOICE && choice !== undefined) {
      if (key === 7 && textAt(s, i, '"index"')) choice.index = numberAt(s, start, end);
      else if (key === 6 && textAt(s, i, '"text"')) choice.text = stringValue(s, { start, end });
      else if (key === 15 && textAt(s, i, '"finish_reason"')) choice.finishReason = stringValue(s, { start, end }) ?? null;
    } else if (inside === DELTA && choice !== undefined) {
      if (key === 9 && textAt(s, i, '"content"')) choice.text = stringValue(s, { start, end });
      else if (key === 6 && textAt(s, i, '"role"')) choice.role = true;
      else if (key === 19 && textAt(s, i, '"reasoning_content"')) choice.reasoningContent = stringValue(s, { start, end });
      else if (key === 11 && textAt(s, i, '"reasoning"')) choice.reasoning = stringValue(s, { start, end });
    } else if (inside === USAGE && scan !== undefined) {
      if (key === 15 && textAt(s, i, '"prompt_tokens"')) scan.promptTokens = numberAt(s, start, end);
      else if (key === 19 && textAt(s, i, '"completion_tokens"')) scan.completionTokens = numberAt(s, start, end);
    }
    const after = skipSpace(s, end);
    if (s.charCodeAt(after) === CLOSE_BRACE) return after + 1;
    if (s.charCodeAt(after) !== COMMA) return -1;
    i = skipSpace(s, after + 1);
  }
}

/** The index after the key string at `i`, or -1 when no string starts there. */
function keyEndAt(s: string, i: number): number {
  return s.charCodeAt(i) === QUOTE ? stringEnd(s, i) : -1;
}

/** The start of the value after a key ending at `keyEnd` (past its colon), or -1. */
function valueAfter(s: string, keyEnd: number): number {
  if (keyEnd < 0) return -1;
  const colon = skipSpace(s, keyEnd);
  return s.charCodeAt(colon) === COLON ? skipSpace(s, colon + 1) : -1;
}

/** The non-negative integer in [start, end) read digit by digit; another number through Number(). */
function numberAt(s: string, start: number, end: number): number {
  let n = 0;
  for (let i = start; i < end; i++) {
    const digit = s.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return Number(s.slice(start, end));
    n = n * 10 + digit;
  }
  return n;
}
