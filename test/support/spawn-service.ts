import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";

// The real service as a child process, for tests and benches that need what only a process has:
// signals, a kill, a restart, its own event loop. It runs from the sources through tsx, or, for
// benches that measure what a deployment runs, from the build (`npm run build`, dist/).

const root = join(import.meta.dirname, "../..");

export interface ServiceExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServiceProcess {
  readonly child: ChildProcess;
  readonly url: string;
  /** Every JSON log line the process has written so far. */
  readonly logs: ReadonlyArray<Record<string, unknown>>;
  readonly exited: Promise<ServiceExit>;
  /** Sends the signal and resolves with how the process ended. */
  stop(signal: NodeJS.Signals): Promise<ServiceExit>;
}

export interface SpawnOptions {
  /** How long to wait for "listening"; default 60 s. */
  timeoutMs?: number;
  /** Run the build (dist/src/main.js, as `npm start` does) instead of the sources; build it first. */
  fromBuild?: boolean;
  /** The build's folder, if not dist/ (see buildService). */
  buildDir?: string;
  /** Variables of the parent's environment the service must not see (e.g. DATABASE_URL, for the embedded default). */
  unset?: readonly string[];
}

/**
 * Starts the service on a free loopback port with `env` over the parent's environment (the cron
 * runner off, auth off unless given) and resolves once it logs "listening".
 */
export async function spawnService(
  env: Record<string, string>,
  { timeoutMs = 60_000, fromBuild = false, buildDir = "dist", unset = [] }: SpawnOptions = {},
): Promise<ServiceProcess> {
  const childEnv: Record<string, string | undefined> = { ...process.env, PORT: "0", LOG_LEVEL: "info", CRON_ENABLED: "false", ...env };
  if (env.AUTH_TOKENS === undefined) delete childEnv.AUTH_TOKENS;
  for (const name of unset) delete childEnv[name];
  const args = fromBuild ? [join(buildDir, "src/main.js")] : ["--import", "tsx", "src/main.ts"];
  const child = spawn(process.execPath, args, { cwd: root, env: childEnv, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<ServiceExit>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const logs: Array<Record<string, unknown>> = [];
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no 'listening' log line in ${timeoutMs} ms; stderr: ${stderr}`)), timeoutMs);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const entry = parseLine(line);
      logs.push(entry);
      if (entry.msg === "listening" && typeof entry.url === "string") {
        clearTimeout(timer);
        resolve(entry.url);
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`exited (${code ?? signal}) before listening; stderr: ${stderr}`));
    });
  });
  return {
    child,
    url,
    logs,
    exited,
    stop(signal) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** The services a test file starts over one environment, stopped together at its end. */
export interface ServiceGroup {
  /** Starts one more service with the group's environment (read at each start). */
  start(): Promise<ServiceProcess>;
  /** SIGKILLs every service the group started (a test may have stopped some already). */
  stopAll(): Promise<void>;
}

export function serviceGroup(env: () => Record<string, string>): ServiceGroup {
  const started: ServiceProcess[] = [];
  return {
    async start() {
      const service = await spawnService(env());
      started.push(service);
      return service;
    },
    async stopAll() {
      await Promise.all(started.map((service) => service.stop("SIGKILL")));
    },
  };
}

function parseLine(line: string): Record<string, unknown> {
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return { msg: line };
  }
}

/**
 * Compiles the service as `npm start` does before it starts (`npm run build`), into dist/ or, for a
 * test that must not race another file's build of dist/, into a folder of its own under it.
 */
export function buildService(buildDir = "dist"): void {
  const into = buildDir === "dist" ? [] : ["--", "--outDir", buildDir, "--tsBuildInfoFile", join(buildDir, ".tsbuildinfo")];
  execFileSync("npm", ["run", "build", "--silent", ...into], { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
}
