import { scanChunk, scanChunkFully } from "../../src/server/proxy/continuation/chunk-scan.js";
import { chunkReadCost, streamReaderCost } from "./parts/stream-reader-cost.js";

// npm run bench:reader: the continuation reader's CPU per streamed chunk (64-token chat answers as
// vLLM streams them with continuous usage), whole (events found, chunks read, usage cut out or
// passed on), then the chunk's JSON alone: read as the reader reads it (vLLM's layout: the fast
// path), by the full scan (what any other layout takes), and by JSON.parse, for scale.

for (const usage of ["none", "continuous"] as const) {
  console.log(`stream reader, 64-token answers, usage ${usage}: ${streamReaderCost(20_000, usage).toFixed(0)} ns of CPU per chunk`);
}
console.log(`a chunk's JSON read on the fast path:  ${chunkReadCost(scanChunk).toFixed(0)} ns of CPU per chunk`);
console.log(`a chunk's JSON read by the full scan:  ${chunkReadCost(scanChunkFully).toFixed(0)} ns of CPU per chunk`);
console.log(`a chunk's JSON through JSON.parse:     ${chunkReadCost(JSON.parse).toFixed(0)} ns of CPU per chunk`);
