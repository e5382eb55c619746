import { readFileSync } from "node:fs";
import { RESERVED_ACTORS } from "../../actor.js";
import { ConfigError } from "../../config.js";
import { isScope, SCOPES, type Scope } from "./scopes.js";
import { type NamedToken } from "./token-set.js";

// AUTH_TOKENS_FILE: {"tokens": [{"name", "sha256", "scopes": [...]}]}. The file holds digests,
// not secrets, so it may be readable by whoever deploys the service. Every mistake is a
// ConfigError naming AUTH_TOKENS_FILE and the entry: at start it stops the process, at reload it
// keeps the previous tokens (token-source.ts).

const NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;
const SHA256_HEX = /^[0-9a-fA-F]{64}$/;

/** The file's text and its tokens, read at start (synchronously, before anything listens). */
export function readTokenFile(path: string): { text: string; tokens: NamedToken[] } {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(`AUTH_TOKENS_FILE cannot be read: ${(err as NodeJS.ErrnoException).code ?? "error"} ${path}`);
  }
  return { text, tokens: parseTokenFile(text) };
}

export function parseTokenFile(text: string): NamedToken[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`AUTH_TOKENS_FILE is not valid JSON: ${(err as Error).message}`);
  }
  const tokens = (json as { tokens?: unknown } | null)?.tokens;
  if (typeof json !== "object" || json === null || Array.isArray(json) || !Array.isArray(tokens)) {
    throw new ConfigError('AUTH_TOKENS_FILE must hold an object {"tokens": [{"name", "sha256", "scopes"}]}');
  }
  const parsed = tokens.map((entry, i) => parseEntry(entry, i));
  const names = new Set<string>();
  const digests = new Set<string>();
  parsed.forEach((token, i) => {
    if (names.has(token.name)) fail(i, `name '${token.name}' is used twice`);
    const hex = token.sha256.toString("hex");
    if (digests.has(hex)) fail(i, "sha256 is used by another token (one token, one name)");
    names.add(token.name);
    digests.add(hex);
  });
  return parsed;
}

function parseEntry(entry: unknown, i: number): NamedToken {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) fail(i, "must be an object");
  const { name, sha256, scopes, ...rest } = entry as Record<string, unknown>;
  const unknownKeys = Object.keys(rest);
  if (unknownKeys.length > 0) fail(i, `unknown key '${unknownKeys[0]!.slice(0, 40)}' (keys: name, sha256, scopes)`);
  if (typeof name !== "string" || !NAME.test(name)) {
    fail(i, "name must be 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit");
  }
  if (RESERVED_ACTORS.includes(name)) fail(i, `name '${name}' is reserved (${RESERVED_ACTORS.join(", ")})`);
  // A digest, never the token itself: a 64-hex-digit token would pass, so the rule is stated.
  if (typeof sha256 !== "string" || !SHA256_HEX.test(sha256)) fail(i, "sha256 must be the 64 hex digits of the token's SHA-256 digest");
  if (!Array.isArray(scopes) || scopes.length === 0) fail(i, `scopes must be a non-empty list of ${SCOPES.join(", ")}`);
  const bad = scopes.find((scope) => !isScope(scope));
  if (bad !== undefined) fail(i, `unknown scope '${String(bad).slice(0, 40)}' (scopes: ${SCOPES.join(", ")})`);
  return { name, sha256: Buffer.from(sha256, "hex"), scopes: new Set(scopes as Scope[]) };
}

function fail(index: number, message: string): never {
  throw new ConfigError(`AUTH_TOKENS_FILE tokens[${index}]: ${message}`);
}
