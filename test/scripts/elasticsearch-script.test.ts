import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

// `scripts/elasticsearch.sh start PORT` must never report a node it did not start: with the port
// held by another process it fails at once, naming the port, instead of printing "up" because
// something else answered there.

const root = join(import.meta.dirname, "../..");

describe("scripts/elasticsearch.sh start", () => {
  it("fails with a clear error and a non-zero exit when the port is taken", async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    const port = (holder.address() as AddressInfo).port;
    const state = mkdtempSync(join(tmpdir(), "es-state-"));
    try {
      const child = spawn(join(root, "scripts/elasticsearch.sh"), ["start", String(port)], { env: { ...process.env, ES_STATE_DIR: state } });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
      expect(code).toBe(1);
      expect(stdout).toBe("");
      expect(stderr).toContain(`port ${port} on 127.0.0.1 is taken by another process`);
    } finally {
      holder.close();
      rmSync(state, { recursive: true, force: true });
    }
  }, 30_000);
});
