import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    pool: "forks",
    // Two files at a time even on two cores (vitest's own default there is one): most files wait on
    // services, databases and timers rather than compute, and each has its own databases and
    // indices. On two cores the run takes 12 to 13 minutes instead of 22.
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
