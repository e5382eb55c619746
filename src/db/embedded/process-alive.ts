import { readFileSync } from "node:fs";

/**
 * Whether a process with this pid exists. A killed process its parent has not reaped yet (a
 * zombie) counts as gone where /proc tells (Linux); elsewhere any existing pid counts, so callers
 * never act on a pid alone.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  let stat: string | undefined;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return true;
  }
  return !/^\d+ \(.*\) Z/.test(stat);
}
