// Moving over JSON text without parsing it: skip spaces, a string (found with indexOf, its
// escaped quotes passed over), a whole value; compare a key; decode a string only when it is kept.

/** Where a value (or member) sits in the text: [start, end). */
export interface Span {
  start: number;
  end: number;
}

const QUOTE = 34;
const BACKSLASH = 92;
const COMMA = 44;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;
const OPEN_BRACKET = 91;
const CLOSE_BRACKET = 93;

/**
 * `text` is at `i` in `s`. A slice compared whole: V8's startsWith compares character by character,
 * several times slower on the literals a chunk is read by.
 */
export function textAt(s: string, i: number, text: string): boolean {
  return s.slice(i, i + text.length) === text;
}

/** `span` is the JSON string `"name"`. */
export function isKey(s: string, span: Span, name: string): boolean {
  return span.end - span.start === name.length + 2 && s.startsWith(name, span.start + 1) && s.charCodeAt(span.start) === QUOTE;
}

/** The string at `span` decoded (JSON.parse only when it holds an escape), undefined for another value. */
export function stringValue(s: string, span: Span): string | undefined {
  if (s.charCodeAt(span.start) !== QUOTE) return undefined;
  const inner = s.slice(span.start + 1, span.end - 1);
  return inner.includes("\\") ? (JSON.parse(s.slice(span.start, span.end)) as string) : inner;
}

/** The index after the value at `i`, or -1. */
export function skipValue(s: string, i: number): number {
  const c = s.charCodeAt(i);
  if (c === QUOTE) return stringEnd(s, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    for (let j = i; j < s.length; ) {
      const d = s.charCodeAt(j);
      if (d === QUOTE) {
        j = stringEnd(s, j);
        if (j < 0) return -1;
        continue;
      }
      if (d === OPEN_BRACE || d === OPEN_BRACKET) depth++;
      else if ((d === CLOSE_BRACE || d === CLOSE_BRACKET) && --depth === 0) return j + 1;
      j++;
    }
    return -1;
  }
  let j = i;
  while (j < s.length) {
    const d = s.charCodeAt(j);
    if (d === COMMA || d === CLOSE_BRACE || d === CLOSE_BRACKET || d <= 32) break;
    j++;
  }
  return j > i ? j : -1;
}

/** The index after the string opening at `i` (its closing quote not escaped), or -1. */
export function stringEnd(s: string, i: number): number {
  for (let from = i + 1; ; ) {
    const quote = s.indexOf('"', from);
    if (quote < 0) return -1;
    let slashes = 0;
    while (s.charCodeAt(quote - 1 - slashes) === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

export function skipSpace(s: string, i: number): number {
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c !== 32 && c !== 10 && c !== 13 && c !== 9) return i;
    i++;
  }
  return i;
}
