// nginx as bench:proxy's reference proxy: Debian's package, run as a child process with a
// configuration written to a temporary directory (loopback only, keep-alive to the replica,
// answers passed on as they come, one worker), stopped when the bench ends whatever happens.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { childPids, processCpuSeconds } from "../../shared/support.js";

export interface Nginx {
  port: number;
  /** CPU seconds of its master and worker so far. */
  cpuSeconds(): number;
  version: string;
  stop(): void;
}

/** `nginx` on PATH or in /usr/sbin; undefined when it is not installed. */
export function findNginx(): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/sbin"];
  for (const dir of dirs.filter(Boolean)) {
    try {
      accessSync(join(dir, "nginx"), constants.X_OK);
      return join(dir, "nginx");
    } catch {
      // not here
    }
  }
  return undefined;
}

export const NGINX_MISSING = `nginx is not installed: bench:proxy compares the endpoint proxy with it.
Install it from Debian's packages (as root), then run the bench again:
  apt-get update
  apt-cache policy nginx-light nginx     # which of the two your release has (nginx-light is the smaller)
  apt-get install -y --no-install-recommends nginx-light     # or: nginx
The bench runs nginx as its own child process with its own configuration; the package's service need not run.`;

/** The configuration: one worker, a keep-alive upstream, no buffering of answers, no access log. */
function config(dir: string, port: number, replicaPort: number): string {
  // As root, workers would otherwise run as `nobody`; the bench's own files stay in `dir`.
  const user = process.getuid?.() === 0 ? "user root;\n" : "";
  return `${user}worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream replica {
    server 127.0.0.1:${replicaPort};
    keepalive 128;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port};
    keepalive_requests 1000000;
    location / {
      proxy_pass http://replica;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}

/** Starts nginx in front of the replica on `replicaPort`; resolves once it answers. */
export async function startNginx(binary: string, replicaPort: number): Promise<Nginx> {
  const dir = mkdtempSync(join(tmpdir(), "bench-nginx-"));
  const port = await freePort();
  writeFileSync(join(dir, "nginx.conf"), config(dir, port, replicaPort));
  const child = spawn(binary, ["-p", dir, "-c", join(dir, "nginx.conf"), "-e", join(dir, "error.log")], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const stop = () => {
    child.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  };
  process.once("exit", stop);
  try {
    await answering(child, port, () => `${stderr}${readLog(dir)}`);
  } catch (err) {
    stop();
    throw err;
  }
  return {
    port,
    cpuSeconds: () => [child.pid!, ...childPids(child.pid!)].reduce((sum, pid) => sum + processCpuSeconds(pid), 0),
    version: spawnSync(binary, ["-v"], { encoding: "utf8" }).stderr.trim(),
    stop,
  };
}

function readLog(dir: string): string {
  try {
    return readFileSync(join(dir, "error.log"), "utf8");
  } catch {
    return "";
  }
}

/** Waits (up to 5 s) until nginx answers on `port`; fails with its errors when it exits first. */
async function answering(child: ChildProcess, port: number, errors: () => string): Promise<void> {
  const deadline = Date.now() + 5000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nginx exited (${child.exitCode}):\n${errors()}`);
    const answered = await fetch(`http://127.0.0.1:${port}/`).then(
      () => true,
      () => false,
    );
    if (answered) return;
    if (Date.now() > deadline) throw new Error(`nginx did not answer on port ${port} within 5 s:\n${errors()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A port free on loopback now (nginx binds it a moment later). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
