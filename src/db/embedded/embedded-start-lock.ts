import { randomBytes } from "node:crypto";
import { linkSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { EmbeddedPostgresError } from "./embedded-postgres-error.js";
import { processAlive } from "./process-alive.js";

// One start of the embedded PostgreSQL at a time per DATA_DIR: the service and a sample-data
// command started together would otherwise both run initdb, or one would take the other's
// half-started server (no owner file yet) for an orphan and stop it. The lock is a file created
// exclusively (O_EXCL), holding the starter's pid and a token of its own. Its holder touches it
// every HEARTBEAT_MS; a lock whose holder is gone, or that nobody touched for STALE_AFTER_MS (its
// pid reused by another program, on a system where that cannot be told), is taken over.

const HEARTBEAT_MS = 2_000;
const STALE_AFTER_MS = 20_000;
const POLL_MS = 200;

export interface StartLock {
  release(): void;
}

export interface StartLockOptions {
  /** How long to wait for another starter; it may be replaying a crashed server's WAL. */
  waitMs: number;
  /** Called once when the lock is held by another live starter and this one waits. */
  onWait?: (holderPid: number) => void;
}

interface Holder {
  pid: number;
  token: string;
}

export async function acquireStartLock(file: string, { waitMs, onWait }: StartLockOptions): Promise<StartLock> {
  const mine: Holder = { pid: process.pid, token: randomBytes(12).toString("hex") };
  const deadline = Date.now() + waitMs;
  let waitedFor: number | undefined;
  for (;;) {
    if (tryCreate(file, mine)) return held(file, mine);
    const holder = readHolder(file);
    if (holder === "gone") continue;
    if (holder === undefined || isStale(file, holder)) {
      takeOver(file, holder);
      continue;
    }
    if (Date.now() > deadline) {
      throw new EmbeddedPostgresError(
        `another process (pid ${holder.pid}) has been starting the embedded PostgreSQL of this DATA_DIR for over ${Math.round(waitMs / 1000)} s (lock ${file})`,
      );
    }
    if (waitedFor !== holder.pid) onWait?.(holder.pid);
    waitedFor = holder.pid;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

function tryCreate(file: string, holder: Holder): boolean {
  try {
    writeFileSync(file, JSON.stringify(holder), { flag: "wx", mode: 0o600 });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}

function held(file: string, mine: Holder): StartLock {
  const heartbeat = setInterval(() => {
    const now = new Date();
    try {
      utimesSync(file, now, now);
    } catch {
      // Removed under us: release() then finds nothing of ours to remove.
    }
  }, HEARTBEAT_MS);
  heartbeat.unref();
  return {
    release() {
      clearInterval(heartbeat);
      const holder = readHolder(file);
      if (typeof holder === "object" && holder.token === mine.token) rmSync(file, { force: true });
    },
  };
}

/** The holder written in the file; "gone" when the file vanished; undefined when unreadable. */
function readHolder(file: string): Holder | "gone" | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return "gone";
    throw err;
  }
  try {
    const parsed = JSON.parse(text) as Partial<Holder>;
    return typeof parsed.pid === "number" && typeof parsed.token === "string" ? { pid: parsed.pid, token: parsed.token } : undefined;
  } catch {
    // Written by a starter killed between creating and filling it, or being written right now.
    return ageMs(file) > STALE_AFTER_MS ? undefined : { pid: -1, token: "" };
  }
}

function isStale(file: string, holder: Holder): boolean {
  if (holder.pid === -1) return false;
  return !processAlive(holder.pid) || ageMs(file) > STALE_AFTER_MS;
}

function ageMs(file: string): number {
  try {
    return Date.now() - statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

/**
 * Removes a stale lock without removing a fresh one: the file is moved aside first, and if what
 * was moved is not the stale lock judged (another waiter took over in between and created its
 * own), it is put back.
 */
function takeOver(file: string, stale: Holder | undefined): void {
  const aside = `${file}.stale-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    renameSync(file, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
  const moved = readHolder(aside);
  const sameLock = stale === undefined ? moved === undefined : typeof moved === "object" && moved.token === stale.token;
  if (!sameLock) {
    try {
      linkSync(aside, file);
    } catch {
      // A third starter created a lock in between: it keeps it.
    }
  }
  rmSync(aside, { force: true });
}
