import { createHash, randomBytes } from "node:crypto";

// A key's secret (SPEC.md section 2, "Keys for callers"): `sk-` and the base64url form of 32
// random bytes (43 characters). Only its SHA-256 is stored; the secret itself lives in the create
// or rotate answer and nowhere else.

const SECRET_PREFIX = "sk-";
const SECRET_SHAPE = /^sk-[A-Za-z0-9_-]{43}$/;
/** How many of the secret's first characters are kept to tell keys apart: `sk-` and 5 more. */
const SHOWN_CHARACTERS = 8;

/** A fresh secret. */
export function newSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString("base64url");
}

/** The 32 bytes stored for a secret and looked up for a bearer token. */
export function secretDigest(secret: string): Buffer {
  return createHash("sha256").update(secret).digest();
}

/** What may be shown of a secret: its first 8 characters. */
export function keyPrefixOf(secret: string): string {
  return secret.slice(0, SHOWN_CHARACTERS);
}

/** Whether a bearer token has a key's shape (a key unknown, revoked or expired is refused, auth on or off). */
export function isKeyShaped(token: string): boolean {
  return SECRET_SHAPE.test(token);
}
