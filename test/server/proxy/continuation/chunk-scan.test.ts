import { describe, expect, it } from "vitest";
import { scanChunk, scanChunkFully } from "../../../../src/server/proxy/continuation/chunk-scan.js";
import { parsedView, scannedView } from "./chunk-view.js";

// Each chunk read by the full scan (whatever its layout) must say what JSON.parse says of it, and
// cutting its usage member out must leave valid JSON: the same chunk without usage. The fast path
// for vLLM's layout is tested in vllm-chunk.test.ts.
const CHUNKS = [
  '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":9,"total_tokens":9,"completion_tokens":0}}',
  '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a \\"usage\\": {\\"completion_tokens\\": 99} }] \\\\"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":9,"total_tokens":10,"completion_tokens":1}}',
  '{ "id": "c2", "object": "chat.completion.chunk", "created": 2, "model": "m", "usage": null, "choices": [ { "index": 0, "delta": { "content": "\\u00e9\\n日本" }, "finish_reason": "stop" } ] }',
  '{"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}},"id":"c3","choices":[{"index":1,"delta":{"content":"x"},"finish_reason":null},{"index":0,"delta":{"content":"y"},"finish_reason":"length"}]}',
  '{"id":"c4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\\"content\\":1}"}}]},"logprobs":{"content":[{"token":"z","logprob":-1}]},"finish_reason":null}]}',
  '{"id":"cmpl-5","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":5,"completion_tokens":1}}',
  '{ "id": "c7", "choices": [ { "index": 0, "delta": { "reasoning_content": "think \\"hard\\"", "reasoning": null, "content": null } } ] }',
  '{"id":"c6","object":"chat.completion.chunk","created":6,"model":"m","choices":[],"usage":{"prompt_tokens":4,"total_tokens":9,"completion_tokens":5}}',
  // A reasoning model's chunks: vLLM's reasoning_content (newer: reasoning), null beside content.
  '{"id":"c7","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"Let me \\"think\\""},"logprobs":null,"finish_reason":null}]}',
  '{"id":"c8","object":"chat.completion.chunk","created":8,"model":"m","choices":[{"index":0,"delta":{"reasoning":"Hmm","content":null},"finish_reason":null}]}',
  '{"id":"c9","object":"chat.completion.chunk","created":9,"model":"m","choices":[{"index":0,"delta":{"content":"ok","reasoning_content":null,"reasoning":""},"finish_reason":null}]}',
];

describe("scanChunkFully", () => {
  it.each(CHUNKS.map((c) => [c]))("reads %s as JSON.parse does", (chunk) => {
    const scan = scanChunkFully(chunk)!;
    expect(scannedView(chunk, scan)).toEqual(parsedView(chunk));
    expect(scanChunk(chunk)).toEqual(scan);
  });

  it("tells error events, and refuses what is not a JSON object", () => {
    expect(scanChunk('{"error":{"message":"x","code":500}}')!.error).toBe(true);
    expect(scanChunk('{"object":"error","message":"x"}')!.error).toBe(true);
    expect(scanChunk('{"object":"chat.completion.chunk","choices":[]}')!.error).toBe(false);
    for (const bad of ["[1]", "{not json", '{"id":"a"', '{"id" "a"}', '{"a":1 "b":2}', "", '{"choices":[{"index":0}']) expect(scanChunk(bad)).toBeUndefined();
    expect(scanChunk('{"choices":[{"index":0,"delta":{"reasoning":"\\q"}}]}')).toBeUndefined();
  });
});
