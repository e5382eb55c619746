import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedPostgres } from "../../src/db/embedded/embedded-postgres.js";

// The PostgreSQL of a test run when DATABASE_URL is unset: the project's embedded server, started
// once for the run in a DATA_DIR of its own under the OS temp dir. Test files get its superuser's
// URL through DATABASE_URL (they create and drop databases and end sessions), and so do the
// services they spawn, which inherit the environment.

export interface TestPostgres {
  /** The superuser's URL. */
  readonly url: string;
  readonly dataDir: string;
  /** Stops the server and removes its DATA_DIR. */
  stop(): Promise<void>;
}

export async function startTestPostgres(): Promise<TestPostgres> {
  const dataDir = mkdtempSync(join(tmpdir(), "test-postgres-"));
  let embedded;
  try {
    embedded = await startEmbeddedPostgres(dataDir, { whenRunning: "refuse" });
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  // An interrupted run (Ctrl-C, SIGTERM) ends without the teardown: the server stops with this
  // process (its watchdog sees it go), and a detached shell removes the DATA_DIR once the server
  // has removed its postmaster.pid, its last act.
  const onExit = () => removeWhenStopped(dataDir);
  process.once("exit", onExit);
  return {
    url: embedded.adminUrl,
    dataDir,
    async stop() {
      process.off("exit", onExit);
      await embedded.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function removeWhenStopped(dataDir: string): void {
  const pidFile = join(dataDir, "postgres", "postmaster.pid");
  const script = `for _ in $(seq 600); do [ -e "$1" ] || break; sleep 0.1; done; rm -rf "$2"`;
  spawn("sh", ["-c", script, "cleanup", pidFile, dataDir], { detached: true, stdio: "ignore" }).unref();
}
