import { createTask, type Logger as CronLogger, type TaskOptions } from "node-cron";
import type { Logger } from "pino";
import { ConflictError, messageOf } from "../errors.js";
import { isDependencyDown } from "./indexing-error.js";

// The in-process cron runner (SPEC.md section 3): the nightly batch and the half-hourly
// incremental indexing, on node-cron in Korea time. Jobs take the indexing job lock themselves,
// so a tick that meets a running job gets ConflictError and is skipped with a log line rather
// than queued: the next tick comes soon enough, and a queue would pile runs up behind a slow one.

export const CRON_TIMEZONE = "Asia/Seoul";

export interface CronJob {
  name: string;
  /** A node-cron expression, or "off". */
  expression: string;
  run(): Promise<unknown>;
}

export type TickOutcome = "completed" | "skipped" | "failed";

export interface CronTaskInfo {
  name: string;
  expression: string;
  /** The next `count` times the task fires after now. */
  nextRuns(count: number): Date[];
}

export interface CronRunner {
  start(): void;
  /** Stops scheduling; resolves when a tick that is running has finished. */
  stop(): Promise<void>;
  /** The tasks that are switched on, for inspection. */
  tasks(): CronTaskInfo[];
  /** Runs one tick of the named task now, exactly as the schedule would. */
  fire(name: string): Promise<TickOutcome>;
}

export interface CronRunnerOptions {
  jobs: readonly CronJob[];
  logger: Logger;
  timezone?: string;
}

export function createCronRunner(options: CronRunnerOptions): CronRunner {
  const { logger, timezone = CRON_TIMEZONE } = options;
  const jobs = options.jobs.filter((job) => job.expression !== "off");
  const inFlight = new Set<Promise<TickOutcome>>();
  let stopped = false;

  const tick = (job: CronJob): Promise<TickOutcome> => {
    if (stopped) return Promise.resolve("skipped");
    const running = runTick(job, logger).finally(() => inFlight.delete(running));
    inFlight.add(running);
    return running;
  };
  const tasks = jobs.map((job) => ({
    job,
    task: createTask(job.expression, () => tick(job), taskOptions(job, timezone, logger)),
  }));

  return {
    start() {
      for (const { job, task } of tasks) {
        void task.start();
        logger.info({ job: job.name, expression: job.expression, timezone }, "cron task scheduled");
      }
    },
    async stop() {
      stopped = true;
      // destroy, not just stop: node-cron keeps every task in a process-wide registry until then.
      await Promise.all(tasks.map(({ task }) => task.destroy()));
      await Promise.allSettled([...inFlight]);
    },
    tasks() {
      return tasks.map(({ job, task }) => ({ name: job.name, expression: job.expression, nextRuns: (count) => task.getNextRuns(count) }));
    },
    fire(name) {
      const found = tasks.find(({ job }) => job.name === name);
      if (!found) throw new Error(`no cron task named '${name}'`);
      return tick(found.job);
    },
  };
}

function taskOptions(job: CronJob, timezone: string, logger: Logger): TaskOptions {
  // unref: a scheduled tick alone must not keep a stopping process alive.
  return { timezone, name: job.name, noOverlap: true, unref: true, logger: cronLogger(logger) };
}

async function runTick(job: CronJob, logger: Logger): Promise<TickOutcome> {
  const started = Date.now();
  try {
    await job.run();
    logger.info({ job: job.name, elapsed_ms: Date.now() - started }, "cron job completed");
    return "completed";
  } catch (err) {
    if (err instanceof ConflictError) {
      logger.info({ job: job.name, reason: err.message }, "cron tick skipped: another indexing job is running");
      return "skipped";
    }
    // A dependency that is down (the search engine or the database) is expected now and then, and
    // the next tick tries again: a warn line without a stack trace, as the run's own line is.
    if (isDependencyDown(err)) logger.warn({ job: job.name, reason: messageOf(err) }, "cron job failed: a dependency is unavailable");
    else logger.error({ err, job: job.name }, "cron job failed");
    return "failed";
  }
}

/** node-cron's own messages (missed executions and the like) go to the service log. */
function cronLogger(logger: Logger): CronLogger {
  const child = logger.child({ component: "node-cron" });
  return {
    info: (message) => child.info(message),
    warn: (message) => child.warn(message),
    error: (message, err) => child.error({ err: err ?? message }, typeof message === "string" ? message : message.message),
    debug: (message, err) => child.debug({ err }, typeof message === "string" ? message : message.message),
  };
}
