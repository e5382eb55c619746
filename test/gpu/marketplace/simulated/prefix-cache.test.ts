import { describe, expect, it } from "vitest";
import { BLOCK_TOKENS, createPrefixCache } from "../../../../src/gpu/marketplace/simulated/prefix-cache.js";

/** A text of `blocks` whole blocks (64 characters each), distinct per `tag`. */
function blocks(tag: string, count: number): string {
  return Array.from({ length: count }, (_, i) => `${tag}-${i}:`.padEnd(64, ".")).join("");
}

describe("simulated model server: its prefix cache, as vLLM's", () => {
  it.each([
    { case: "a prompt never seen finds nothing", seen: [], prompt: blocks("a", 4), cached: 0 },
    { case: "the same prompt again finds all its blocks but the last (its last token is always computed)", seen: [blocks("a", 4)], prompt: blocks("a", 4), cached: 3 * BLOCK_TOKENS },
    { case: "a prompt with a token more than one seen finds every block seen", seen: [blocks("a", 4)], prompt: `${blocks("a", 4)}tail`, cached: 4 * BLOCK_TOKENS },
    { case: "a longer prompt that starts like one seen finds its shared beginning (a partial hit)", seen: [blocks("a", 4)], prompt: blocks("a", 4) + blocks("b", 6), cached: 4 * BLOCK_TOKENS },
    { case: "a prompt that differs in its first block finds nothing, however much follows alike", seen: [blocks("a", 4)], prompt: `X${blocks("a", 4).slice(1)}`, cached: 0 },
    { case: "a block matches only behind the same beginning (hashes are chained)", seen: [blocks("a", 1) + blocks("b", 3)], prompt: blocks("c", 1) + blocks("b", 3), cached: 0 },
    { case: "a partial block at the end is not kept", seen: [`${blocks("a", 2)}half a block`], prompt: `${blocks("a", 2)}half a block and more`, cached: 2 * BLOCK_TOKENS },
    { case: "a prompt shorter than a block is never cached", seen: ["short"], prompt: "short", cached: 0 },
  ])("$case", ({ seen, prompt, cached }) => {
    const cache = createPrefixCache(65_536);
    for (const earlier of seen) cache.admit(earlier);
    expect(cache.admit(prompt)).toEqual({ promptTokens: Math.ceil(prompt.length / 4), cachedTokens: cached });
  });

  it("counts tokens asked for and found, as vLLM's queries and hits", () => {
    const cache = createPrefixCache(65_536);
    cache.admit(`${blocks("s", 8)}first question`);
    cache.admit(`${blocks("s", 8)}second question`);
    const tokens = (text: string) => Math.ceil(text.length / 4);
    expect(cache.counts).toEqual({ queries: tokens(`${blocks("s", 8)}first question`) + tokens(`${blocks("s", 8)}second question`), hits: 8 * BLOCK_TOKENS });
  });

  it("holds no more blocks than its budget, evicting the least recently used", () => {
    const cache = createPrefixCache(10 * BLOCK_TOKENS);
    cache.admit(blocks("old", 4));
    cache.admit(blocks("mid", 4));
    cache.admit(`${blocks("old", 4)}x`);
    cache.admit(blocks("new", 4));
    expect(cache.blocks).toBe(10);
    // "mid" was used least recently: its blocks went first, then none of "old", used since.
    expect(cache.admit(`${blocks("old", 4)}x`).cachedTokens).toBe(4 * BLOCK_TOKENS);
    expect(cache.admit(`${blocks("mid", 4)}x`).cachedTokens).toBe(2 * BLOCK_TOKENS);
  });

  it("evicts a prompt's tail before its shared beginning", () => {
    const cache = createPrefixCache(6 * BLOCK_TOKENS);
    cache.admit(blocks("system", 2) + blocks("chat", 4));
    cache.admit(blocks("other", 2));
    expect(cache.blocks).toBe(6);
    expect(cache.admit(`${blocks("system", 2)}x`).cachedTokens).toBe(2 * BLOCK_TOKENS);
  });

  it("keeps a prompt larger than its budget only in part, and stays within it", () => {
    const cache = createPrefixCache(4 * BLOCK_TOKENS);
    cache.admit(blocks("huge", 20));
    expect(cache.blocks).toBe(4);
    expect(cache.admit(`${blocks("huge", 20)}x`).cachedTokens).toBe(4 * BLOCK_TOKENS);
  });

  it("caches nothing with a budget of 0, and still counts the queries", () => {
    const cache = createPrefixCache(0);
    cache.admit(blocks("a", 4));
    expect(cache.admit(`${blocks("a", 4)}x`).cachedTokens).toBe(0);
    expect(cache.blocks).toBe(0);
    expect(cache.counts.queries).toBeGreaterThan(0);
  });
});
