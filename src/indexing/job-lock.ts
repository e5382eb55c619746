import pg from "pg";
import type { Logger } from "pino";
import { ConflictError, UnavailableError } from "../errors.js";

// One lock for every indexing job and the batch (SPEC.md "exclusive windows"). In process it is
// a plain flag; across processes it is a PostgreSQL advisory lock held on a dedicated connection,
// outside the knex pool, for the whole job, so replicas sharing a database never overlap.

/** Arbitrary but fixed: every process of this product locks the same key. */
const ADVISORY_LOCK_KEY = 1_229_866_072;
const APPLICATION_PREFIX = "indexing-job:";

export interface RunningJob {
  readonly jobName: string;
  readonly startedAt: Date;
}

export interface JobLock {
  /** Runs `work` holding the lock; throws ConflictError (409) naming the running job when taken. */
  run<T>(jobName: string, work: (signal: AbortSignal) => Promise<T>): Promise<T>;
  /** The job this process is running, if any. */
  current(): RunningJob | undefined;
  /**
   * Shutdown: asks the running job to stop and resolves when it has released the lock. From then
   * on no job starts (503), so a request arriving before the server closes cannot begin a run
   * that the closing pools would cut short.
   */
  abortAndWait(): Promise<void>;
}

export interface JobLockOptions {
  /** The database to take the advisory lock in; undefined keeps only the in-process flag (its unit tests). */
  databaseUrl: string | undefined;
  logger: Logger;
}

export function createJobLock({ databaseUrl, logger }: JobLockOptions): JobLock {
  let running: (RunningJob & { controller: AbortController; ended: Promise<void> }) | undefined;
  let closed = false;

  return {
    async run(jobName, work) {
      if (closed) throw new UnavailableError(`the service is shutting down: indexing job '${jobName}' was not started`);
      if (running) throw conflict(running.jobName, running.startedAt);
      const controller = new AbortController();
      const startedAt = new Date();
      let ended!: () => void;
      // Claimed synchronously, before any await, so two calls in one tick cannot both pass.
      running = { jobName, startedAt, controller, ended: new Promise<void>((resolve) => (ended = resolve)) };
      try {
        // A lock whose session died is no lock: another replica may take it, so the job stops.
        const onLost = () => {
          logger.warn({ job: jobName }, "the job lock's database connection was lost: aborting the job");
          controller.abort(new Error("the job lock's database connection was lost"));
        };
        const release = databaseUrl ? await acquireAdvisory(databaseUrl, jobName, startedAt, onLost) : async () => {};
        try {
          return await work(controller.signal);
        } finally {
          await release().catch((err: unknown) => logger.warn({ err, job: jobName }, "releasing the advisory lock failed"));
        }
      } finally {
        running = undefined;
        ended();
      }
    },
    current() {
      return running && { jobName: running.jobName, startedAt: running.startedAt };
    },
    async abortAndWait() {
      closed = true;
      const job = running;
      if (!job) return;
      job.controller.abort(new Error("shutting down"));
      await job.ended;
    },
  };
}

function conflict(jobName: string, startedAt: Date | undefined): ConflictError {
  const since = startedAt ? ` since ${startedAt.toISOString()}` : "";
  return new ConflictError(`indexing job '${jobName}' is already running${since}; try again when it has finished`, {
    extra: { running_job: jobName },
  });
}

/**
 * Takes the advisory lock on a connection of its own; the returned function releases it. Once
 * held, `onLost` is called if that connection fails or ends before the release.
 */
async function acquireAdvisory(databaseUrl: string, jobName: string, startedAt: Date, onLost: () => void): Promise<() => Promise<void>> {
  // application_name carries the job so that a process refused the lock can name the holder.
  const client = new pg.Client({
    connectionString: databaseUrl,
    application_name: `${APPLICATION_PREFIX}${jobName}@${startedAt.toISOString()}`.slice(0, 63),
    connectionTimeoutMillis: 10_000,
    // Without keep-alive a silently dropped connection would look alive for hours.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  });
  let state: "acquiring" | "held" | "lost" | "releasing" = "acquiring";
  const lost = () => {
    if (state !== "held") return;
    state = "lost";
    onLost();
  };
  client.on("error", lost);
  client.on("end", lost);
  try {
    await client.connect();
  } catch (err) {
    throw new UnavailableError("the database is unreachable: cannot take the indexing job lock", { cause: err });
  }
  try {
    const { rows } = await client.query<{ locked: boolean }>("select pg_try_advisory_lock($1) as locked", [ADVISORY_LOCK_KEY]);
    if (!rows[0]?.locked) {
      const holder = await describeHolder(client);
      throw conflict(holder?.jobName ?? "in another process", holder?.startedAt);
    }
  } catch (err) {
    await client.end().catch(() => {});
    throw err;
  }
  state = "held";
  return async () => {
    // A lost session holds no lock: there is nothing to unlock, only the client to close.
    if (state === "lost") return void (await client.end().catch(() => {}));
    state = "releasing";
    try {
      await client.query("select pg_advisory_unlock($1)", [ADVISORY_LOCK_KEY]);
    } finally {
      // Closing the session releases the lock even if the unlock above failed.
      await client.end();
    }
  };
}

/** The job holding the advisory lock, read from its session's application_name. */
async function describeHolder(client: pg.Client): Promise<RunningJob | undefined> {
  const { rows } = await client.query<{ application_name: string }>(
    `select a.application_name
       from pg_locks l join pg_stat_activity a on a.pid = l.pid
      where l.locktype = 'advisory' and l.granted and l.objid = $1 and l.database = (select oid from pg_database where datname = current_database())`,
    [ADVISORY_LOCK_KEY],
  );
  const name = rows[0]?.application_name;
  if (!name?.startsWith(APPLICATION_PREFIX)) return undefined;
  const at = name.lastIndexOf("@");
  const startedAt = new Date(name.slice(at + 1));
  return { jobName: name.slice(APPLICATION_PREFIX.length, at), startedAt: Number.isNaN(startedAt.getTime()) ? new Date(0) : startedAt };
}
