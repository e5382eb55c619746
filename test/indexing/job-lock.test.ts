import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../src/errors.js";
import { createJobLock } from "../../src/indexing/job-lock.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { silentLogger } from "./helpers.js";

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
});

afterAll(async () => {
  await db?.drop();
});

/** Starts `jobName` on `lock` and keeps it running until the returned release() is called. */
async function hold(lock: ReturnType<typeof createJobLock>, jobName: string) {
  let release!: () => void;
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const done = lock.run(jobName, () => {
    started();
    return new Promise<string>((resolve) => (release = () => resolve(jobName)));
  });
  await running;
  return { release, done };
}

describe("job lock in one process", () => {
  it("refuses a second job with a ConflictError naming the running job and its start time", async () => {
    const lock = createJobLock({ databaseUrl: undefined, logger: silentLogger });
    const first = await hold(lock, "index_goods_full");
    expect(lock.current()?.jobName).toBe("index_goods_full");

    const error = await lock.run("product_batch", async () => "never").catch((err: unknown) => err);
    expect(error).toBeInstanceOf(ConflictError);
    expect((error as Error).message).toMatch(/^indexing job 'index_goods_full' is already running since \d{4}-/);

    first.release();
    expect(await first.done).toBe("index_goods_full");
    expect(lock.current()).toBeUndefined();
    expect(await lock.run("product_batch", async () => "ran")).toBe("ran");
  });

  it("is released when the job throws", async () => {
    const lock = createJobLock({ databaseUrl: undefined, logger: silentLogger });
    await expect(lock.run("failing", async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(await lock.run("next", async () => 1)).toBe(1);
  });

  it("aborts the running job's signal on abortAndWait and resolves once it has ended", async () => {
    const lock = createJobLock({ databaseUrl: undefined, logger: silentLogger });
    let sawAbort = false;
    const job = lock.run("long", (signal) => new Promise<void>((resolve) => signal.addEventListener("abort", () => {
      sawAbort = true;
      resolve();
    })));
    await lock.abortAndWait();
    expect(sawAbort).toBe(true);
    expect(lock.current()).toBeUndefined();
    await job;
  });
});

describe("job lock across processes (advisory lock)", () => {
  it("refuses a job while another process holds the lock, naming that process's job, and allows it afterwards", async () => {
    const replicaA = createJobLock({ databaseUrl: db.url, logger: silentLogger });
    const replicaB = createJobLock({ databaseUrl: db.url, logger: silentLogger });
    const first = await hold(replicaA, "product_batch");

    const error = await replicaB.run("index_goods_incremental", async () => "never").catch((err: unknown) => err);
    expect(error).toBeInstanceOf(ConflictError);
    expect((error as Error).message).toMatch(/'product_batch' is already running since \d{4}-/);
    expect(replicaB.current()).toBeUndefined();

    first.release();
    await first.done;
    expect(await replicaB.run("index_goods_incremental", async () => "ran")).toBe("ran");
  });

  it("holds its lock on a dedicated connection that is closed when the job ends", async () => {
    const lock = createJobLock({ databaseUrl: db.url, logger: silentLogger });
    const job = await hold(lock, "index_goods_cursor");
    const sessions = async () =>
      (await db.knex.raw<{ rows: unknown[] }>(`select 1 from pg_stat_activity where datname = current_database() and application_name like 'indexing-job:%'`)).rows.length;
    expect(await sessions()).toBe(1);
    job.release();
    await job.done;
    expect(await sessions()).toBe(0);
  });
});
