import { getTasks } from "node-cron";
import { afterEach, describe, expect, it, vi } from "vitest";
import pino from "pino";
import { ConflictError, UnavailableError } from "../../src/errors.js";
import { createCronRunner, type CronJob, type CronRunner } from "../../src/indexing/schedule.js";

// The real node-cron scheduler, driven by a fake clock so that no test waits real minutes.

const logger = pino({ level: "silent" });
let runner: CronRunner | undefined;

afterEach(async () => {
  await runner?.stop();
  runner = undefined;
  vi.useRealTimers();
});

function recordingJobs(batch = "0 1 * * *", incremental = "*/30 * * * *") {
  const fired: Array<[string, string]> = [];
  const job = (name: string, expression: string): CronJob => ({
    name,
    expression,
    run: async () => void fired.push([name, new Date().toISOString()]),
  });
  return { fired, jobs: [job("product_batch", batch), job("incremental", incremental)] };
}

const kst = (iso: string) => new Date(`${iso}+09:00`);

describe("cron runner schedule (Asia/Seoul)", () => {
  it("plans the batch daily at 01:00 KST and the incremental run every 30 minutes", () => {
    vi.useFakeTimers({ toFake: ["Date"], now: kst("2026-11-22T00:10:00") });
    runner = createCronRunner({ ...recordingJobs(), logger });
    const [batch, incremental] = runner.tasks();
    expect(batch!.nextRuns(2)).toEqual([kst("2026-11-22T01:00:00"), kst("2026-11-23T01:00:00")]);
    expect(incremental!.nextRuns(3)).toEqual([kst("2026-11-22T00:30:00"), kst("2026-11-22T01:00:00"), kst("2026-11-22T01:30:00")]);
    // 01:00 KST is 16:00 UTC of the day before
    expect(batch!.nextRuns(1)[0]!.toISOString()).toBe("2026-11-21T16:00:00.000Z");
  });

  it("fires the right jobs when the clock passes 00:30 and 01:00 KST", async () => {
    vi.useFakeTimers({ now: kst("2026-11-22T00:29:58") });
    const { fired, jobs } = recordingJobs();
    runner = createCronRunner({ jobs, logger });
    runner.start();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(fired).toEqual([["incremental", "2026-11-21T15:30:00.000Z"]]);
    await vi.advanceTimersByTimeAsync(30 * 60_000);
    expect(fired.slice(1).map(([name]) => name).sort()).toEqual(["incremental", "product_batch"]);
    expect(fired.slice(1).every(([, at]) => at === "2026-11-21T16:00:00.000Z")).toBe(true);
  });

  it("takes its expressions from configuration and leaves out a task set to off", () => {
    runner = createCronRunner({ ...recordingJobs("off", "0 */2 * * *"), logger });
    expect(runner.tasks().map((t) => [t.name, t.expression])).toEqual([["incremental", "0 */2 * * *"]]);
    expect(() => runner!.fire("product_batch")).toThrow(/no cron task/);
  });
});

describe("cron ticks", () => {
  it("skips a tick whose job finds the lock taken, and logs it", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const capture = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    runner = createCronRunner({
      jobs: [{ name: "incremental", expression: "*/30 * * * *", run: async () => Promise.reject(new ConflictError("indexing job 'product_batch' is already running")) }],
      logger: capture,
    });
    expect(await runner.fire("incremental")).toBe("skipped");
    expect(lines).toContainEqual(expect.objectContaining({ job: "incremental", msg: "cron tick skipped: another indexing job is running" }));
  });

  it("reports a failing job without throwing out of the scheduler", async () => {
    runner = createCronRunner({ jobs: [{ name: "product_batch", expression: "0 1 * * *", run: async () => Promise.reject(new Error("boom")) }], logger });
    expect(await runner.fire("product_batch")).toBe("failed");
  });

  it("logs a job failed for a dependency that is down as one warning without a stack, anything else as an error", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const capture = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    runner = createCronRunner({
      jobs: [
        { name: "incremental", expression: "*/30 * * * *", run: async () => Promise.reject(new UnavailableError("Elasticsearch is unreachable")) },
        { name: "product_batch", expression: "0 1 * * *", run: async () => Promise.reject(new Error("boom")) },
      ],
      logger: capture,
    });
    expect(await runner.fire("incremental")).toBe("failed");
    expect(await runner.fire("product_batch")).toBe("failed");
    const failed = lines.filter((line) => String(line.msg).startsWith("cron job failed"));
    expect(failed.map(({ level, job, reason }) => ({ level, job, reason }))).toEqual([
      { level: 40, job: "incremental", reason: "Elasticsearch is unreachable" },
      { level: 50, job: "product_batch", reason: undefined },
    ]);
    expect(failed[0]).not.toHaveProperty("err");
    expect(failed[1]).toHaveProperty("err");
  });

  it("stop() stops scheduling and waits for a running job to finish", async () => {
    let release!: () => void;
    let finished = false;
    runner = createCronRunner({
      jobs: [{ name: "product_batch", expression: "0 1 * * *", run: () => new Promise<void>((r) => (release = r)).then(() => void (finished = true)) }],
      logger,
    });
    runner.start();
    const tick = runner.fire("product_batch");
    let stopped = false;
    const stopping = runner.stop().then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect([finished, await tick]).toEqual([true, "completed"]);
    expect(await runner.fire("product_batch")).toBe("skipped");
    expect([...getTasks().values()].filter((t) => t.name === "product_batch")).toEqual([]);
  });
});
