import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config.js";
import { parseTokenFile } from "../../../src/server/auth/token-file.js";
import { createTokenSet, sha256Of } from "../../../src/server/auth/token-set.js";

const hex = (token: string) => sha256Of(token).toString("hex");
const file = (tokens: unknown) => JSON.stringify({ tokens });

describe("AUTH_TOKENS_FILE", () => {
  it("reads named tokens with their scopes and finds them by their secret", () => {
    const tokens = parseTokenFile(
      file([
        { name: "dashboard", sha256: hex("dash-secret"), scopes: ["gpu:read", "indexing:read"] },
        { name: "scheduler", sha256: hex("sched-secret").toUpperCase(), scopes: ["indexing:run"] },
      ]),
    );
    const set = createTokenSet(tokens);
    expect(set.find("Bearer dash-secret")?.name).toBe("dashboard");
    expect([...set.find("bearer sched-secret")!.scopes]).toEqual(["indexing:run"]);
    expect(set.find("Bearer dash-secre")).toBeUndefined();
    expect(set.find(hex("dash-secret"))).toBeUndefined();
    expect(set.find(`Bearer ${hex("dash-secret")}`)).toBeUndefined();
    expect(set.find(undefined)).toBeUndefined();
  });

  it("accepts an empty list: auth stays on and nobody gets in", () => {
    expect(parseTokenFile(file([]))).toEqual([]);
  });

  const bad: Array<[string, string, RegExp]> = [
    ["not JSON", "{tokens:", /is not valid JSON/],
    ["no tokens list", JSON.stringify({ token: [] }), /must hold an object/],
    ["a list at the top", JSON.stringify([]), /must hold an object/],
    ["a token that is not an object", file(["x"]), /tokens\[0\]: must be an object/],
    ["a bad name", file([{ name: "a b", sha256: hex("x"), scopes: ["gpu:read"] }]), /tokens\[0\]: name must be/],
    ["a reserved name", file([{ name: "system", sha256: hex("x"), scopes: ["gpu:read"] }]), /name 'system' is reserved/],
    ["the secret instead of its digest", file([{ name: "a", sha256: "s3cret", scopes: ["gpu:read"] }]), /sha256 must be the 64 hex digits/],
    ["no scopes", file([{ name: "a", sha256: hex("x"), scopes: [] }]), /scopes must be a non-empty list/],
    ["an unknown scope", file([{ name: "a", sha256: hex("x"), scopes: ["gpu:admin"] }]), /unknown scope 'gpu:admin'/],
    ["an unknown key", file([{ name: "a", sha256: hex("x"), scopes: ["gpu:read"], token: "x" }]), /unknown key 'token'/],
    [
      "a name used twice",
      file([
        { name: "a", sha256: hex("x"), scopes: ["gpu:read"] },
        { name: "a", sha256: hex("y"), scopes: ["gpu:read"] },
      ]),
      /tokens\[1\]: name 'a' is used twice/,
    ],
    [
      "one digest under two names",
      file([
        { name: "a", sha256: hex("x"), scopes: ["gpu:read"] },
        { name: "b", sha256: hex("x"), scopes: ["gpu:write"] },
      ]),
      /tokens\[1\]: sha256 is used by another token/,
    ],
  ];

  it.each(bad)("refuses %s, naming AUTH_TOKENS_FILE", (_case, text, message) => {
    expect(() => parseTokenFile(text)).toThrow(ConfigError);
    expect(() => parseTokenFile(text)).toThrow(message);
    expect(() => parseTokenFile(text)).toThrow(/^AUTH_TOKENS_FILE/);
  });
});
