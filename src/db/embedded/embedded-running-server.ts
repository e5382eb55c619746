import { readFileSync, realpathSync } from "node:fs";
import pg from "pg";
import { EmbeddedPostgresError } from "./embedded-postgres-error.js";
import { processAlive } from "./process-alive.js";

// Which server, if any, runs the cluster, judged only from what PostgreSQL itself records: its
// postmaster.pid (pid, data directory, start time, port, status), checked by connecting to that
// port and reading the server's data_directory and start time. A pid alone proves nothing (it may
// have been reused by any program, and macOS has no /proc to look at it), so a process is
// signalled only once the server answering on the recorded port is this cluster's and started
// when the file says.

/** How long a server whose file says "stopping" and whose port is closed is given to end. */
const STOPPING_GRACE_MS = 10_000;

export interface PidFile {
  pid: number;
  /** As the server was given it (-D); compared by real path. */
  dataDirectory: string;
  /** Seconds since the epoch. */
  startedAt: number;
  port: number;
  /** starting, stopping, ready or standby; absent while the server is coming up. */
  status: string | undefined;
}

export type ServerFound =
  | { kind: "none" }
  /** A postmaster.pid whose server is not running: removing it is safe. */
  | { kind: "stale"; file: PidFile | undefined; reason: string }
  | { kind: "running"; file: PidFile };

export function readPidFile(path: string): PidFile | undefined | "absent" {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return "absent";
    throw err;
  }
  const lines = text.split("\n");
  const [pid, startedAt, port] = [Number(lines[0]), Number(lines[2]), Number(lines[3])];
  if (!(pid > 0 && Number.isInteger(pid) && port > 0 && Number.isInteger(port) && startedAt > 0)) return undefined;
  return { pid, dataDirectory: lines[1] ?? "", startedAt, port, status: lines[7]?.trim() || undefined };
}

export interface FindOptions {
  /** The superuser's password of this cluster. */
  password: string;
  /** How long a server that answers "starting up" or "shutting down" is waited for. */
  waitMs: number;
}

export async function findRunningServer(cluster: string, pidFilePath: string, { password, waitMs }: FindOptions): Promise<ServerFound> {
  const deadline = Date.now() + waitMs;
  let closedSince: number | undefined;
  for (;;) {
    const file = readPidFile(pidFilePath);
    if (file === "absent") return { kind: "none" };
    if (file === undefined) return { kind: "stale", file, reason: "postmaster.pid is incomplete" };
    if (!processAlive(file.pid)) return { kind: "stale", file, reason: `process ${file.pid} is gone` };
    const answer = await askServer(file.port, password);
    if (answer.kind === "identity") {
      if (!sameDirectory(answer.dataDirectory, cluster)) {
        return { kind: "stale", file, reason: `port ${file.port} is served by another cluster (${answer.dataDirectory})` };
      }
      if (Math.abs(Math.floor(answer.startedAt) - file.startedAt) > 1) {
        throw new EmbeddedPostgresError(
          `the embedded PostgreSQL of ${cluster} runs on port ${file.port} but started at another time than its postmaster.pid says: stop it by hand`,
        );
      }
      return { kind: "running", file };
    }
    if (answer.kind === "not-ours") return { kind: "stale", file, reason: `port ${file.port} is served by another program (${answer.detail})` };
    // Nobody listens on the port: the server is gone and its pid now belongs to another program,
    // unless it is this cluster's server on its way out, which removes the file as it ends.
    if (answer.kind === "closed") {
      closedSince ??= Date.now();
      if (file.status !== "stopping" || Date.now() - closedSince > STOPPING_GRACE_MS) {
        return { kind: "stale", file, reason: `nothing listens on port ${file.port}` };
      }
    }
    if (Date.now() > deadline) {
      throw new EmbeddedPostgresError(
        `the server recorded in ${pidFilePath} (pid ${file.pid}, port ${file.port}) neither answers nor ends (${answer.kind === "busy" ? answer.detail : answer.kind}): stop it by hand`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

type Answer =
  | { kind: "identity"; dataDirectory: string; startedAt: number }
  /** Starting up, recovering or shutting down (SQLSTATE 57P03), or no answer in time. */
  | { kind: "busy"; detail: string }
  | { kind: "closed" }
  | { kind: "not-ours"; detail: string };

async function askServer(port: number, password: string): Promise<Answer> {
  const client = new pg.Client({ host: "127.0.0.1", port, user: "postgres", password, database: "postgres", connectionTimeoutMillis: 3_000 });
  client.on("error", () => {});
  try {
    await client.connect();
    const { rows } = await client.query<{ dir: string; started: string }>(
      "select current_setting('data_directory') as dir, extract(epoch from pg_postmaster_start_time())::text as started",
    );
    return { kind: "identity", dataDirectory: rows[0]!.dir, startedAt: Number(rows[0]!.started) };
  } catch (err) {
    const { code, message } = err as { code?: string; message: string };
    if (code === "ECONNREFUSED") return { kind: "closed" };
    if (code === "57P03" || /timeout/i.test(message)) return { kind: "busy", detail: message };
    return { kind: "not-ours", detail: message };
  } finally {
    await client.end().catch(() => {});
  }
}

function sameDirectory(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return false;
  }
}

/**
 * Stops a verified server: SIGINT (fast shutdown), then SIGQUIT, then SIGKILL, each sent only
 * while its postmaster.pid still names it (the server removes the file as it ends, so a pid freed
 * and reused meanwhile is never signalled).
 */
export async function stopVerifiedServer(pidFilePath: string, server: PidFile): Promise<void> {
  const stillIt = () => {
    const now = readPidFile(pidFilePath);
    return typeof now === "object" && now.pid === server.pid && now.startedAt === server.startedAt && processAlive(server.pid);
  };
  const steps: [NodeJS.Signals, number][] = [["SIGINT", 15_000], ["SIGQUIT", 5_000], ["SIGKILL", 5_000]];
  for (const [signal, waitMs] of steps) {
    if (!stillIt()) return;
    try {
      process.kill(server.pid, signal);
    } catch {
      return;
    }
    const deadline = Date.now() + waitMs;
    while (Date.now() < deadline && processAlive(server.pid)) await new Promise((r) => setTimeout(r, 100));
    if (!processAlive(server.pid)) return;
  }
  throw new EmbeddedPostgresError(`a stale embedded PostgreSQL (pid ${server.pid}) would not stop`);
}
