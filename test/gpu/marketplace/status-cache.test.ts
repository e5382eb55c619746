import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import { withStatusCache } from "../../../src/gpu/marketplace/status-cache.js";
import { adapterOn } from "../../support/vastai/adapter.js";
import { startVastEmulator, type VastEmulator } from "../../support/vastai/emulator.js";

// The status cache in front of a real adapter (vast.ai's, against its emulator, which counts every
// call): repeated reads within the TTL cost one call, and a destroy asked while one of the same
// instance is under way (a DELETE racing the sync loop) joins it instead of calling again.

const API_KEY = "vast-cache-key-0123456789";
let vast: VastEmulator;
let market: Marketplace;
let adapter: Marketplace;

beforeEach(async () => {
  vast = await startVastEmulator({ apiKey: API_KEY, minIntervalMs: { destroy: 300 } });
  adapter = adapterOn(vast, API_KEY, { createLookupMs: undefined, minIntervalMs: undefined, retries: 2, maxBackoffMs: 20 });
  market = withStatusCache(adapter, 2_000);
});

afterEach(async () => {
  await market.close();
  await vast.close();
});

const calls = (method: string) => vast.requests.filter((r) => r.method === method && /^\/api\/v0\/instances\/\d+\/$/.test(r.path));

describe("the status cache", () => {
  it("answers repeated reads of one instance from one call, and joins concurrent destroys of it into one", async () => {
    const id = String(vast.addForeignInstance("gpu-1"));
    await Promise.all([market.getInstance(id), market.getInstance(id), market.getInstance(id)]);
    await market.getInstance(id);
    expect(calls("GET")).toHaveLength(1);

    await Promise.all([market.destroyInstance(id), market.destroyInstance(id), market.destroyInstance(id)]);
    expect(calls("DELETE").map((r) => r.status)).toEqual([200]);
    expect(vast.instances.has(Number(id))).toBe(false);
    expect(await market.getInstance(id)).toBeUndefined(); // the destroy forgot the cached answer
  });

  it("asks the marketplace again for a fresh read, whose answer serves the reads after it; it passes the interruptible flag on", async () => {
    // A TTL longer than the show interval the limiter keeps between the reads.
    const cached = withStatusCache(adapter, 10_000);
    expect(cached.interruptible).toBe(true);
    const id = String(vast.addForeignInstance("gpu-2"));
    expect((await cached.getInstance(id))!.status).not.toBe("exited");
    vast.setStatus(Number(id), "exited");
    expect((await cached.getInstance(id))!.status).not.toBe("exited"); // cached
    expect((await cached.getInstance(id, undefined, { fresh: true }))!.status).toBe("exited");
    expect((await cached.getInstance(id))!.status).toBe("exited");
    expect(calls("GET")).toHaveLength(2);
  });
});
