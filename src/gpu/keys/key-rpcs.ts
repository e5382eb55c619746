import type { ServiceImpl } from "@connectrpc/connect";
import type { GpuService } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { excerpt, InvalidInputError, NotFoundError } from "../../errors.js";
import { keyPrefixOf, newSecret, secretDigest } from "../../server/keys/key-secret.js";
import type { KeyRecord, KeyStore } from "../../server/keys/key-store.js";
import type { KeyUsageStore } from "../../server/keys/key-usage-store.js";
import type { EndpointRecord } from "../endpoints/resource/endpoint-store.js";
import { periodAt } from "./key-period.js";
import { keyChangeOf, MAX_LIVE_KEYS, newKeySettingsOf, USAGE_WINDOWS, validGrace, validUsageEndpoint, validWindow } from "./key-request.js";
import { keyMessage, usagePointMessage } from "./key-view.js";

// The key RPCs (SPEC.md section 2, "Keys for callers"): the resource and its usage. A secret is
// made here, shown in the create or rotate answer, and only its digest is stored; every process's
// directory (server/keys/) picks a change up within a second.

type KeyRpcs = Pick<ServiceImpl<typeof GpuService>, "createKey" | "listKeys" | "getKey" | "updateKey" | "rotateKey" | "deleteKey" | "getKeyUsage">;

export interface KeyRpcsOptions {
  keys: KeyStore;
  usage: KeyUsageStore;
  /** Each caller's answers in flight over every process (the endpoints' published load). */
  inFlight: { callersInFlight(callers: readonly string[]): Promise<Map<string, number>> };
  /** Where a budgeted key's endpoints are checked for a token price. */
  endpoints: { getByName(name: string): Promise<EndpointRecord | null> };
  now?: () => number;
}

export function createKeyRpcs(options: KeyRpcsOptions): KeyRpcs {
  const { keys, usage, inFlight, endpoints, now = Date.now } = options;

  async function views(records: readonly KeyRecord[], secret?: string) {
    const at = now();
    const periods = records.map((record) => ({ record, period: periodAt(record.createdAt, record.budgetDuration, at) }));
    const [used, flying] = await Promise.all([
      usage.periodTotals(periods.map(({ record, period }) => ({ keyName: record.name, from: period.startsAt }))),
      inFlight.callersInFlight([...new Set(records.map((record) => record.name))]),
    ]);
    // A name may be taken again after a revocation: each key's period starts at or after its
    // creation, and the answers in flight under a name are the live key's when there is one.
    const live = new Set(records.filter((record) => !record.revokedAt).map((record) => record.name));
    return periods.map(({ record, period }) => {
      const mine = !record.revokedAt || !live.has(record.name);
      return keyMessage({ record, period, used: used.get(record.name), inFlight: mine ? (flying.get(record.name) ?? 0) : 0, secret });
    });
  }

  async function view(record: KeyRecord, secret?: string) {
    return (await views([record], secret))[0]!;
  }

  async function requireLive(name: string): Promise<KeyRecord> {
    const key = await keys.getByName(name);
    if (!key) throw new NotFoundError(`Key '${excerpt(name)}' not found`);
    if (key.revokedAt) throw new NotFoundError(`Key '${excerpt(name)}' is revoked`);
    return key;
  }

  /** A budget cannot be kept on an unpriced endpoint: refused when it is set, not when it is spent. */
  async function checkPriced(settings: { maxBudgetMicros: number | null; endpoints: readonly string[] }): Promise<void> {
    if (settings.maxBudgetMicros === null) return;
    for (const name of settings.endpoints) {
      const endpoint = await endpoints.getByName(name);
      if (endpoint && endpoint.phase !== "deleted" && !endpoint.tokenPrice) {
        throw new InvalidInputError(`endpoint '${name}' has no token_price: a key with max_budget may call only priced endpoints`, { extra: { field: "endpoints" } });
      }
    }
  }

  return {
    async createKey(req) {
      const settings = newKeySettingsOf(req, now());
      await checkPriced(settings);
      const secret = newSecret();
      const created = await keys.insert({ ...settings, secretSha256: secretDigest(secret), keyPrefix: keyPrefixOf(secret) }, MAX_LIVE_KEYS);
      return view(created, secret);
    },
    async listKeys() {
      return { keys: await views(await keys.list()) };
    },
    async getKey({ name }) {
      const key = await keys.getByName(name);
      if (!key) throw new NotFoundError(`Key '${excerpt(name)}' not found`);
      return view(key);
    },
    async updateKey(req) {
      const change = keyChangeOf(req, now());
      const current = await requireLive(req.name);
      await checkPriced({ maxBudgetMicros: change.maxBudgetMicros === undefined ? current.maxBudgetMicros : change.maxBudgetMicros, endpoints: change.endpoints ?? current.endpoints });
      const updated = await keys.update(current.id, change);
      if (!updated) throw new NotFoundError(`Key '${excerpt(req.name)}' is revoked`);
      return view(updated);
    },
    async rotateKey({ name, graceS }) {
      const grace = validGrace(graceS);
      const current = await requireLive(name);
      const secret = newSecret();
      const rotated = await keys.rotate(current.id, { sha256: secretDigest(secret), keyPrefix: keyPrefixOf(secret) }, grace);
      if (!rotated) throw new NotFoundError(`Key '${excerpt(name)}' is revoked`);
      return view(rotated, secret);
    },
    async deleteKey({ name }) {
      const key = await keys.getByName(name);
      if (!key) throw new NotFoundError(`Key '${excerpt(name)}' not found`);
      return view(key.revokedAt ? key : await keys.revoke(key.id));
    },
    async getKeyUsage(req) {
      const window = validWindow(req.window);
      const endpointName = validUsageEndpoint(req.endpoint);
      const key = await keys.getByName(req.name);
      if (!key) throw new NotFoundError(`Key '${excerpt(req.name)}' not found`);
      const step = window === "7d" ? "hour" : "minute";
      const stepMs = step === "hour" ? 3_600_000 : 60_000;
      // Whole steps: the window's first step is the one holding its start.
      const from = new Date(Math.floor((now() - USAGE_WINDOWS[window]) / stepMs) * stepMs);
      const points = await usage.points({ keyName: key.name, from, step, endpointName });
      return { points: points.map(usagePointMessage) };
    },
  };
}
