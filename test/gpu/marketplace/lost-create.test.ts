import { describe, expect, it } from "vitest";
import { ConflictError, OutcomeUnknownError, UnavailableError } from "../../../src/errors.js";
import { createSettlingLost, isDefiniteCreateAnswer, type LostCreatePolicy } from "../../../src/gpu/marketplace/lost-create.js";
import type { MarketInstance } from "../../../src/gpu/marketplace/port.js";

// The one policy every adapter follows for a create whose outcome is unknown, as pure rules: which
// answers settle a create, and what follows a lost one (look up, resend, stay unknown).

const POLICY: LostCreatePolicy = { lookupMs: 0, lookEveryMs: 0, resends: 2, backoffMs: 1 };
const machine = (id: string) => ({ id, label: "gpu-1" }) as MarketInstance;
const lost = () => new OutcomeUnknownError("no answer");

describe("a create's answer", () => {
  it.each([
    [200, true], [201, true], [400, true], [401, true], [402, true], [403, true], [404, true], [410, true], [422, true],
    [408, false], [409, false], [418, false], [500, false], [501, false], [502, false], [505, false], [520, false], [524, false], [301, false],
  ])("HTTP %i settles it: %s", (status, definite) => {
    expect(isDefiniteCreateAnswer(status)).toBe(definite);
  });
});

describe("a create whose outcome is lost", () => {
  it("is looked up before it is sent again, and found is what the create rented", async () => {
    const calls: string[] = [];
    const found = await createSettlingLost(POLICY, {
      market: "M",
      label: "gpu-1",
      send: async () => (calls.push("send"), Promise.reject(lost())),
      find: async () => (calls.push("find"), calls.length > 3 ? machine("m2") : undefined),
    });
    expect(found.id).toBe("m2");
    expect(calls).toEqual(["send", "find", "send", "find"]);
  });

  it("sent `resends` more times at most, then stays unknown", async () => {
    let sends = 0;
    const settling = createSettlingLost(POLICY, { market: "M", label: "gpu-1", send: async () => (sends++, Promise.reject(lost())), find: async () => undefined });
    await expect(settling).rejects.toThrow(/nothing labelled gpu-1 is listed after 3 attempts/);
    expect(sends).toBe(3);
  });

  it("refused on a resend, stays unknown: the refusal says nothing of the lost attempt", async () => {
    let sends = 0;
    const settling = createSettlingLost(POLICY, {
      market: "M",
      label: "gpu-1",
      send: async () => (sends++ === 0 ? Promise.reject(lost()) : Promise.reject(new ConflictError("no capacity"))),
      find: async () => undefined,
    });
    await expect(settling).rejects.toThrow(OutcomeUnknownError);
    await expect(settling).rejects.toThrow(/sent again was refused \(no capacity\)/);
  });

  it("refused at once, is refused: nothing was rented", async () => {
    await expect(createSettlingLost(POLICY, { market: "M", label: "gpu-1", send: async () => Promise.reject(new ConflictError("taken")), find: async () => undefined })).rejects.toThrow(ConflictError);
  });

  it("whose lookup fails, stays unknown, never a failure that would fail the record", async () => {
    const settling = createSettlingLost(POLICY, { market: "M", label: "gpu-1", send: async () => Promise.reject(lost()), find: async () => Promise.reject(new UnavailableError("list down")) });
    await expect(settling).rejects.toThrow(OutcomeUnknownError);
    await expect(settling).rejects.toThrow(/could not be listed.*list down/);
  });
});
