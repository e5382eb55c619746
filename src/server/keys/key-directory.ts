import type { Logger } from "pino";
import { secretDigest } from "./key-secret.js";
import type { KeyRef } from "./allowances.js";
import type { TokenPrice } from "./allowance/limits.js";
import { hasLimits } from "./allowance/limits.js";
import type { KeyEntry, KeyStore } from "./key-store.js";

// The keys every process admits, in memory (SPEC.md section 2, "Keys for callers"): a request
// is judged without a query, and its secret hashed once per reload. Every pollMs the directory
// reads one small statement, a stamp that moves with any write of a key (and the endpoints with a
// token price); it reloads the live keys only when the stamp moved. A new or rotated secret, a revocation and a PATCH are thus in force
// in every process within pollMs and a reload; an expiry and a rotation's grace are checked
// against the clock at each lookup. While the database cannot be read the last keys stay in
// force, said once per outage.

/** How often each process polls the stamp: a change is in force everywhere well within 1 s. */
export const KEY_POLL_MS = 250;
/** Secrets presented whose key was found, remembered until the next reload (a live key has two at most). */
const SEEN_MAX = 4_096;

/** A live key as a request presents it. */
export interface KeyGrant {
  name: string;
  /** The endpoints it may call; empty: every endpoint. */
  endpoints: ReadonlySet<string>;
  /** It has a max_budget: it may call only endpoints with a token price. */
  hasBudget: boolean;
  /** Its limits for the proxy's admission; absent: a key without limits (nothing to count). */
  allowance?: KeyRef;
}

export type KeyLookup = { found: "live"; grant: KeyGrant } | { found: "expired"; name: string } | { found: "none" };

export interface KeyDirectory {
  /** The key a bearer secret opens now. */
  lookUp(secret: string): KeyLookup;
  /** Whether the endpoint has a token price (as of the last poll). */
  isPriced(endpoint: string): boolean;
  /** The endpoint's token price (as of the last poll); undefined when unpriced. */
  priceOf(endpoint: string): TokenPrice | undefined;
  /** Polls once now: resolves when a change seen is in force. */
  refresh(): Promise<void>;
  /** Loads the keys, then polls every pollMs. */
  start(): Promise<void>;
  stop(): void;
}

interface Held {
  grant: KeyGrant;
  expiresAt: number | null;
  /** For a previous secret: when its grace ends. */
  validUntil: number | null;
}

export interface KeyDirectoryOptions {
  store: Pick<KeyStore, "directoryStamp" | "liveEntries">;
  logger: Logger;
  pollMs?: number;
  now?: () => number;
}

export function createKeyDirectory(options: KeyDirectoryOptions): KeyDirectory {
  const { store, logger, pollMs = KEY_POLL_MS, now = Date.now } = options;
  let bySecret = new Map<string, Held>();
  // The secrets presented that opened a key, so that a request hashes its secret once per reload,
  // not once per request. Dropped whenever the keys are reloaded (a revocation or rotation is then
  // in force as before) and when full; a secret that opens nothing is never kept.
  let seen = new Map<string, Held>();
  let priced: ReadonlyMap<string, TokenPrice> = new Map();
  let stamp: string | undefined;
  let unreadable = false;
  let timer: NodeJS.Timeout | undefined;
  let stopped = true;
  let polling: Promise<void> | undefined;

  async function poll(): Promise<void> {
    try {
      const read = await store.directoryStamp();
      priced = read.prices;
      if (read.stamp !== stamp) {
        bySecret = index(await store.liveEntries());
        seen = new Map();
        stamp = read.stamp;
      }
      if (unreadable) logger.info("key directory readable again");
      unreadable = false;
    } catch (err) {
      if (!unreadable) logger.warn({ err }, "key directory unreadable: the last keys read stay in force");
      unreadable = true;
    }
  }

  // One poll at a time: a refresh during a poll waits for it and then polls again.
  function refresh(): Promise<void> {
    const next = (polling ?? Promise.resolve()).then(poll);
    polling = next;
    return next;
  }

  const tick = async () => {
    await refresh();
    if (!stopped) timer = setTimeout(() => void tick(), pollMs).unref();
  };

  return {
    lookUp(secret) {
      let held = seen.get(secret);
      if (held === undefined) {
        held = bySecret.get(secretDigest(secret).toString("hex"));
        if (!held) return { found: "none" };
        if (seen.size >= SEEN_MAX) seen.clear();
        seen.set(secret, held);
      }
      const at = now();
      if (held.validUntil !== null && at >= held.validUntil) return { found: "none" };
      if (held.expiresAt !== null && at >= held.expiresAt) return { found: "expired", name: held.grant.name };
      return { found: "live", grant: held.grant };
    },
    isPriced: (endpoint) => priced.has(endpoint),
    priceOf: (endpoint) => priced.get(endpoint),
    refresh,
    async start() {
      if (!stopped) return;
      stopped = false;
      await refresh();
      timer = setTimeout(() => void tick(), pollMs).unref();
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** The live keys by the hex digest of each secret they accept (a rotated key: two). */
function index(entries: readonly KeyEntry[]): Map<string, Held> {
  const map = new Map<string, Held>();
  for (const entry of entries) {
    const grant: KeyGrant = { name: entry.name, endpoints: new Set(entry.endpoints), hasBudget: entry.hasBudget };
    if (hasLimits(entry.limits)) grant.allowance = { id: entry.id, limits: entry.limits, createdAtMs: entry.createdAt.getTime() };
    const expiresAt = entry.expiresAt?.getTime() ?? null;
    map.set(entry.secretSha256.toString("hex"), { grant, expiresAt, validUntil: null });
    if (entry.previousSha256 && entry.previousValidUntil) {
      map.set(entry.previousSha256.toString("hex"), { grant, expiresAt, validUntil: entry.previousValidUntil.getTime() });
    }
  }
  return map;
}
