import { createHash, timingSafeEqual } from "node:crypto";
import { SCOPES, type Scope } from "./scopes.js";

// The tokens the service accepts at one moment: each a name (the actor it writes on records), the
// SHA-256 digest of its secret, and its scopes. Secrets are never kept, only digests.

export interface NamedToken {
  readonly name: string;
  /** SHA-256 of the token, 32 bytes. */
  readonly sha256: Buffer;
  readonly scopes: ReadonlySet<Scope>;
}

export interface TokenSet {
  readonly tokens: readonly NamedToken[];
  /** The token an Authorization header presents, or undefined when none matches. */
  find(authorization: string | null | undefined): NamedToken | undefined;
}

export function sha256Of(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}

/** AUTH_TOKENS: each token holds every scope and is named by its position (`AUTH_TOKENS#1`, ...). */
export function envTokens(tokens: readonly string[]): NamedToken[] {
  return tokens.map((token, i) => ({ name: `AUTH_TOKENS#${i + 1}`, sha256: sha256Of(token), scopes: new Set(SCOPES) }));
}

export function createTokenSet(tokens: readonly NamedToken[]): TokenSet {
  return {
    tokens,
    find(authorization) {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "");
      const given = sha256Of(match?.[1] ?? "");
      // Compared against every token, equal-length digests, no early exit: the time taken says
      // nothing about which token, or how much of one, was right.
      let found: NamedToken | undefined;
      for (const token of tokens) {
        if (timingSafeEqual(token.sha256, given) && found === undefined) found = token;
      }
      return match === null ? undefined : found;
    },
  };
}
