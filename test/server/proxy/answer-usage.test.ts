import { describe, expect, it } from "vitest";
import { estimatedPromptTokens, NO_USAGE, streamedUsage, USAGE_ANSWER_BYTES, wholeAnswerUsage } from "../../../src/server/proxy/answer-usage.js";

// What one answer used: the replica's own count, or an estimate marked as such.

const json = (value: unknown) => Buffer.from(JSON.stringify(value));

describe("wholeAnswerUsage", () => {
  it.each([
    ["the replica's usage", json({ choices: [{ message: { content: "hello" } }], usage: { prompt_tokens: 12, completion_tokens: 3 } }), 400, { promptTokens: 12, completionTokens: 3, estimated: false }],
    ["no usage: the prompt as bytes / 4, the chat text / 4", json({ choices: [{ message: { content: "x".repeat(10) } }] }), 401, { promptTokens: 101, completionTokens: 3, estimated: true }],
    ["no usage: a completion's text", json({ choices: [{ text: "abcd" }, { text: "efgh" }] }), 8, { promptTokens: 2, completionTokens: 2, estimated: true }],
    ["usage that is not counts", json({ usage: { prompt_tokens: -1, completion_tokens: "3" } }), 40, { promptTokens: 10, completionTokens: 0, estimated: true }],
    ["not JSON", Buffer.from("<html>"), 40, { promptTokens: 10, completionTokens: 0, estimated: true }],
    ["not read whole", undefined, 40, { promptTokens: 10, completionTokens: 0, estimated: true }],
  ])("%s", (_, answer, bodyBytes, expected) => {
    expect(wholeAnswerUsage(answer, bodyBytes)).toEqual(expected);
  });
});

describe("streamedUsage", () => {
  it.each([
    ["counted by the replicas", { promptTokens: 20, tokens: 7, tokensCounted: true, textEvents: 7 }, { promptTokens: 20, completionTokens: 7, estimated: false }],
    ["a replica that did not count: one token per text event", { promptTokens: 20, tokens: 3, tokensCounted: false, textEvents: 9 }, { promptTokens: 20, completionTokens: 9, estimated: true }],
    ["no prompt count: the body's bytes / 4", { promptTokens: undefined, tokens: 4, tokensCounted: true, textEvents: 4 }, { promptTokens: 25, completionTokens: 4, estimated: true }],
  ])("%s", (_, reader, expected) => {
    expect(streamedUsage(reader, 100)).toEqual(expected);
  });

  it("estimates rounding up, and a refused request used nothing", () => {
    expect(estimatedPromptTokens(1)).toBe(1);
    expect(estimatedPromptTokens(0)).toBe(0);
    expect(NO_USAGE).toEqual({ promptTokens: 0, completionTokens: 0, estimated: false });
    expect(USAGE_ANSWER_BYTES).toBe(1024 * 1024);
  });
});
