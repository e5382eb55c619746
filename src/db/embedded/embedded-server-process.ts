import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, lstatSync, readFileSync, symlinkSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, relative, resolve } from "node:path";
import pg from "pg";
import { EmbeddedPostgresError } from "./embedded-postgres-error.js";

// The PostgreSQL programs of the embedded default and the processes they run as: the platform's
// binaries, the command (in a user namespace as root), the minimal environment, and the server
// under its watchdog shell.

export const READY_TIMEOUT_MS = 120_000; // crash recovery of a large cluster can take a while
const STOP_TIMEOUT_MS = 30_000;

export interface Binaries {
  initdb: string;
  postgres: string;
}

/** The platform's binaries package; its library symlinks are restored if install scripts did not run. */
export async function postgresBinaries(): Promise<Binaries> {
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
export function command(program: string, args: readonly string[]): [string, string[]] {
  if (process.getuid?.() !== 0) return [program, [...args]];
  return ["unshare", ["--user", "--map-user=65534", "--map-group=65534", "--", program, ...args]];
}

/**
 * What initdb, the watchdog and the server see of the environment: enough to find programs and
 * temporary space, and nothing of the service's own (its secrets: API keys, tokens, URLs with
 * passwords), which a server passes on to every program it runs.
 */
const PASSED_TO_SERVER = ["PATH", "TMPDIR", "TZ", "SYSTEMROOT"];

function serverEnvironment(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { LC_ALL: "C", LC_MESSAGES: "C" };
  for (const name of PASSED_TO_SERVER) if (process.env[name] !== undefined) env[name] = process.env[name];
  return env;
}

export function rootHint(output: string): string {
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

/** The watchdog shell and the server under it. */
export class ServerProcess {
  output = "";
  readonly exited: Promise<number | null>;

  /** Starts `program` under the watchdog, in a process group of its own, with the minimal environment. */
  static spawn(program: string, args: readonly string[], onLog: ((line: string) => void) | undefined): ServerProcess {
    const child = spawn("sh", ["-c", WATCHDOG, "watchdog", program, ...args], {
      detached: true,
      stdio: ["pipe", "pipe", "pipe"],
      env: serverEnvironment(),
    });
    return new ServerProcess(child, onLog);
  }

  private constructor(
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

export async function freeLoopbackPort(): Promise<number> {
  return await new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolvePort(port));
    });
  });
}

export function runProgram(program: string, args: readonly string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolveRun) => {
    const child = spawn(program, args, { env: serverEnvironment(), stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    child.on("error", (err) => resolveRun({ code: null, output: `${output}${err.message}` }));
    child.on("close", (code) => resolveRun({ code, output }));
  });
}

export function lastLines(output: string): string {
  return output.trim().split("\n").slice(-3).join(" | ").slice(0, 600);
}
