import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sha256Of } from "../../src/server/auth/token-set.js";

export interface TestToken {
  name: string;
  secret: string;
  scopes: string[];
}

/** An AUTH_TOKENS_FILE in a fresh directory, rewritten with `write`, removed with `remove`. */
export function createTokenFile(tokens: readonly TestToken[]) {
  const dir = mkdtempSync(join(tmpdir(), "auth-tokens-"));
  const path = join(dir, "tokens.json");
  const write = (list: readonly TestToken[]) =>
    writeFileSync(path, JSON.stringify({ tokens: list.map((t) => ({ name: t.name, sha256: sha256Of(t.secret).toString("hex"), scopes: t.scopes })) }, null, 2));
  write(tokens);
  return {
    path,
    write,
    writeText: (text: string) => writeFileSync(path, text),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
