import pino from "pino";
import { describe, expect, it } from "vitest";
import { createEndpointLoop } from "../../../src/gpu/endpoints/control/endpoint-loop.js";

// The loop starts each tick's rounds without awaiting them (a slow rental must not hold the next
// tick). A round that fails before it starts anything (the database away: the endpoints cannot
// even be listed) must then be caught by the loop itself: an unhandled rejection ends a Node
// process, and with it every control loop and the proxy.

describe("the endpoint loop", () => {
  it("logs a round that fails outright, and leaves no rejection unhandled", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    const warnings: string[] = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => void warnings.push(JSON.parse(line).msg) });
    let rounds = 0;
    const loop = createEndpointLoop({
      controller: {
        probeOnce: async () => undefined,
        decideOnce: async () => {
          rounds++;
          throw new Error("database \"x\" is not currently accepting connections");
        },
        settle: async () => undefined,
      },
      intervalMs: 10,
      logger,
    });
    try {
      loop.start();
      await new Promise((resolve) => setTimeout(resolve, 100));
      await loop.stop();
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
    expect(rounds).toBeGreaterThan(2);
    expect(unhandled).toEqual([]);
    expect(warnings).toContain("endpoint controller round failed; retrying next round");
  });
});
