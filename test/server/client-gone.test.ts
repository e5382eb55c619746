import { connect } from "node:net";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/logger.js";
import { listen, type RunningServer } from "../../src/server/listen.js";
import { createTemplatesOnlyHandler } from "../support/partial-app.js";
import { waitFor } from "../support/wait.js";

// A client that leaves in the middle of its upload is not a server error: one info line, no
// stack trace, whatever the route (REST or RPC). Anything else would let a client flood the logs.

const lines: Array<Record<string, unknown>> = [];
const destination = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
    done();
  },
});
let server: RunningServer;

beforeAll(async () => {
  server = await listen({ handler: createTemplatesOnlyHandler(createLogger("debug", destination)), host: "127.0.0.1", port: 0 });
});

afterAll(async () => {
  await server?.close(500);
});

/** Sends the headers and part of a body, then disconnects. */
async function leaveMidUpload(path: string, contentType: string): Promise<void> {
  const socket = connect(server.port, "127.0.0.1");
  await new Promise((resolve) => socket.once("connect", resolve));
  socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: ${contentType}\r\nContent-Length: 1000\r\n\r\n{"a":`);
  await new Promise((resolve) => setTimeout(resolve, 100));
  socket.destroy();
}

describe("a client that leaves mid-upload", () => {
  it.each([
    ["REST", "/api/gpu/search-offers", "application/json"],
    ["Connect", "/gpu.v1.GpuService/ListTemplates", "application/proto"],
    ["Connect JSON", "/gpu.v1.GpuService/ListTemplates", "application/json"],
  ])("is logged once at info without a stack trace (%s)", async (_name, path, contentType) => {
    lines.length = 0;
    await leaveMidUpload(path, contentType);
    await waitFor(() => lines.some((line) => line.msg === "client left before its answer"), "the client-left line", 5_000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(lines.filter((line) => (line.level as number) >= 40)).toEqual([]);
    const left = lines.filter((line) => line.msg === "client left before its answer");
    expect(left).toHaveLength(1);
    expect(left[0]!.level).toBe(30);
    expect(JSON.stringify(left[0])).not.toContain("stack");
  });
});
