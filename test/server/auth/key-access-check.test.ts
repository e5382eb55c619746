import pino from "pino";
import { describe, expect, it } from "vitest";
import { createAccessCheck } from "../../../src/server/auth/access-check.js";
import { createTokenSource } from "../../../src/server/auth/token-source.js";
import { createKeyDirectory } from "../../../src/server/keys/key-directory.js";
import { newSecret, secretDigest } from "../../../src/server/keys/key-secret.js";
import { tokenPrice } from "../../../src/server/keys/allowance/limits.js";
import type { KeyEntry } from "../../../src/server/keys/key-store.js";

// The access check's verdicts for keys, on a directory fed by a fake store and a fake clock: the
// actor is the key's name, a key's expiry and a rotation's grace end at their instant without a
// reload, and static tokens keep their own verdicts.

const logger = pino({ level: "silent" });
const STATIC = "static-token-0123456789";

async function checkWith(entries: KeyEntry[], clock: { now: number }) {
  const keys = createKeyDirectory({
    store: { directoryStamp: async () => ({ stamp: "1", prices: new Map([["priced", tokenPrice(1, 2)]]) }), liveEntries: async () => entries },
    logger,
    now: () => clock.now,
  });
  await keys.refresh();
  return createAccessCheck(createTokenSource({ envTokens: [STATIC], file: undefined, logger }), keys);
}

const entry = (name: string, secret: string, fields: Partial<KeyEntry> = {}): KeyEntry => ({
  name,
  secretSha256: secretDigest(secret),
  previousSha256: null,
  previousValidUntil: null,
  endpoints: [],
  hasBudget: false,
  expiresAt: null,
  id: name,
  limits: {},
  createdAt: new Date(0),
  ...fields,
});

describe("the access check with keys", () => {
  it("acts as the key's name on its endpoints, and as the token's name for a static token", async () => {
    const secret = newSecret();
    const check = await checkWith([entry("team-a", secret, { endpoints: ["chat"] })], { now: Date.now() });
    expect(check(`Bearer ${secret}`, "endpoints:invoke", "POST /endpoints/chat/v1/chat/completions", "chat")).toMatchObject({ ok: true, actor: "team-a" });
    expect(check(`Bearer ${secret}`, "endpoints:invoke", "GET /endpoints/code/v1/models", "code")).toMatchObject({ ok: false, status: 403 });
    expect(check(`Bearer ${secret}`, "gpu:read", "gpu.v1.GpuService/ListKeys")).toMatchObject({ ok: false, status: 401 });
    expect(check(`Bearer ${STATIC}`, "endpoints:invoke", "GET /endpoints/code/v1/models", "code")).toMatchObject({ ok: true, actor: "AUTH_TOKENS#1" });
  });

  it("hands the proxy a key's limits with its verdict (a key without limits: none), and no key for a static token", async () => {
    const [limited, free] = [newSecret(), newSecret()];
    const check = await checkWith(
      [entry("limited", limited, { id: "42", limits: { rpm: 3 }, createdAt: new Date(1000) }), entry("free", free)],
      { now: Date.now() },
    );
    const verdict = check(`Bearer ${limited}`, "endpoints:invoke", "POST /endpoints/chat/v1/chat/completions", "chat");
    expect(verdict).toMatchObject({ ok: true, key: { name: "limited", allowance: { id: "42", limits: { rpm: 3 }, createdAtMs: 1000 } } });
    const unlimited = check(`Bearer ${free}`, "endpoints:invoke", "POST /endpoints/chat/v1/chat/completions", "chat");
    expect(unlimited.ok && unlimited.key?.allowance).toBeUndefined();
    expect(check(`Bearer ${STATIC}`, "endpoints:invoke", "GET /endpoints/code/v1/models", "code")).toEqual({ ok: true, actor: "AUTH_TOKENS#1" });
  });

  it("refuses an expired key and a rotated-out secret at their instant, without a reload", async () => {
    const clock = { now: Date.parse("2026-11-29T00:00:00Z") };
    const current = newSecret();
    const previous = newSecret();
    const check = await checkWith(
      [
        entry("rotated", current, { previousSha256: secretDigest(previous), previousValidUntil: new Date(clock.now + 1000) }),
        entry("expiring", previous.replace(/.$/, "x"), { expiresAt: new Date(clock.now + 2000) }),
      ],
      clock,
    );
    const call = (secret: string) => check(`Bearer ${secret}`, "endpoints:invoke", "GET /endpoints/chat/v1/models", "chat");
    expect(call(previous)).toMatchObject({ ok: true, actor: "rotated" });
    expect(call(previous.replace(/.$/, "x"))).toMatchObject({ ok: true, actor: "expiring" });
    clock.now += 1000;
    expect(call(previous)).toMatchObject({ ok: false, status: 401 });
    expect(call(current)).toMatchObject({ ok: true, actor: "rotated" });
    clock.now += 1000;
    expect(call(previous.replace(/.$/, "x"))).toMatchObject({ ok: false, status: 401, detail: "key 'expiring' has expired" });
  });

  it("holds a key with a budget to priced endpoints", async () => {
    const secret = newSecret();
    const check = await checkWith([entry("budgeted", secret, { hasBudget: true })], { now: Date.now() });
    expect(check(`Bearer ${secret}`, "endpoints:invoke", "GET /endpoints/priced/v1/models", "priced")).toMatchObject({ ok: true, actor: "budgeted" });
    const refused = check(`Bearer ${secret}`, "endpoints:invoke", "GET /endpoints/free/v1/models", "free");
    expect(refused).toMatchObject({ ok: false, status: 403 });
    expect(!refused.ok && refused.detail).toContain("'free' has no token_price");
  });
});

describe("the key directory", () => {
  it("reloads the keys only when the stamp moved, and keeps the last keys while the database is away", async () => {
    let stamp = "1";
    let reloads = 0;
    let away = false;
    const secret = newSecret();
    const keys = createKeyDirectory({
      store: {
        directoryStamp: async () => {
          if (away) throw new Error("connection refused");
          return { stamp, prices: new Map() };
        },
        liveEntries: async () => {
          reloads++;
          return stamp === "1" ? [entry("first", secret)] : [];
        },
      },
      logger,
    });
    for (let i = 0; i < 3; i++) await keys.refresh();
    expect(reloads).toBe(1);
    expect(keys.lookUp(secret)).toMatchObject({ found: "live", grant: { name: "first" } });
    away = true;
    await keys.refresh();
    expect(keys.lookUp(secret)).toMatchObject({ found: "live" });
    away = false;
    stamp = "2";
    await keys.refresh();
    expect(reloads).toBe(2);
    expect(keys.lookUp(secret)).toEqual({ found: "none" });
  });
});
