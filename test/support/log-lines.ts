import { Writable } from "node:stream";
import type { Logger } from "pino";
import { createLogger } from "../../src/logger.js";

/** The service's logger writing into `lines`, one parsed JSON object per log line. */
export function captureLogLines(level = "info"): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger(level, destination), lines };
}
