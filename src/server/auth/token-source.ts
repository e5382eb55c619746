import { watch, type FSWatcher } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname } from "node:path";
import type { Logger } from "pino";
import { parseTokenFile, readTokenFile } from "./token-file.js";
import { createTokenSet, envTokens, type NamedToken, type TokenSet } from "./token-set.js";

// Where the accepted tokens come from: AUTH_TOKENS (fixed for the process's life) and
// AUTH_TOKENS_FILE (re-read when it changes and on SIGHUP, without a restart). With neither, auth
// is off. A bad file at start throws (a configuration error); at reload it keeps the previous
// tokens and logs one error.

export interface TokenSourceOptions {
  envTokens: readonly string[];
  file: string | undefined;
  logger: Logger;
  /** Quiet time after a change event before the file is read: editors write in several steps. */
  debounceMs?: number;
}

export interface TokenSource {
  /** True when any token is configured (a file with an empty list counts: nobody gets in). */
  readonly enabled: boolean;
  current(): TokenSet;
  /** Re-reads the file (SIGHUP); resolves once the new tokens, or the kept ones, are in force. */
  reload(): Promise<void>;
  /** Follows the file's directory: editors and secret mounts replace the file rather than write it. */
  watch(): void;
  close(): void;
}

export function createTokenSource(options: TokenSourceOptions): TokenSource {
  const { file, logger, debounceMs = 100 } = options;
  const fixed = envTokens(options.envTokens);
  const setOf = (fromFile: readonly NamedToken[]) => createTokenSet([...fixed, ...fromFile]);
  const initial = file === undefined ? undefined : readTokenFile(file);
  let lastText = initial?.text;
  // One error per bad state of the file, however many change events it causes.
  let lastFailure: string | undefined;
  let current = setOf(initial?.tokens ?? []);
  let watcher: FSWatcher | undefined;
  let timer: NodeJS.Timeout | undefined;
  let reloading = Promise.resolve();

  const readAndApply = async (): Promise<void> => {
    if (file === undefined) return;
    let text: string;
    try {
      text = await readFile(file, "utf8");
    } catch (err) {
      // A replace in progress can hide the file for a moment; the next event reads it again.
      fail(`AUTH_TOKENS_FILE cannot be read: ${(err as NodeJS.ErrnoException).code ?? "error"}`, undefined);
      return;
    }
    if (text === lastText) return;
    try {
      current = setOf(parseTokenFile(text));
      logger.info({ token_names: current.tokens.map((t) => t.name) }, "AUTH_TOKENS_FILE reloaded");
    } catch (err) {
      fail((err as Error).message, text);
      return;
    }
    lastText = text;
    lastFailure = undefined;
  };

  const fail = (message: string, text: string | undefined) => {
    const key = `${message}\n${text ?? ""}`;
    if (key === lastFailure) return;
    lastFailure = key;
    lastText = text;
    logger.error({ detail: message }, "AUTH_TOKENS_FILE reload failed: keeping the previous tokens");
  };

  const reload = () => {
    reloading = reloading.then(readAndApply, readAndApply);
    return reloading;
  };

  return {
    enabled: fixed.length > 0 || file !== undefined,
    current: () => current,
    reload,
    watch() {
      if (file === undefined || watcher) return;
      watcher = watch(dirname(file), () => {
        clearTimeout(timer);
        timer = setTimeout(() => void reload(), debounceMs);
      });
      watcher.on("error", (err) => logger.error({ err }, "AUTH_TOKENS_FILE watch failed; SIGHUP still reloads it"));
      watcher.unref();
    },
    close() {
      clearTimeout(timer);
      watcher?.close();
      watcher = undefined;
    },
  };
}
