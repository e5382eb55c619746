import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../src/db/database.js";
import { createKnex } from "../../src/db/knex.js";
import { createLogger } from "../../src/logger.js";

// A DATA_DIR written by an earlier version, whose embedded database was PGlite (DATA_DIR/pglite)
// at an older schema: its first start on the embedded PostgreSQL brings every row across, GPU
// instances that may still be billed first among them, and keeps the old folder aside.

const dataDir = mkdtempSync(join(tmpdir(), "pglite-import-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** The earlier layout: PGlite at the first three migrations, with an instance, its logs and 2,500 goods. */
async function writeEarlierDataDir(): Promise<void> {
  const db = await PGlite.create(join(dataDir, "pglite"));
  const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0 });
  await server.start();
  const knex = createKnex(`postgres://postgres@${server.getServerConn()}/postgres`, { poolMax: 1 });
  try {
    for (let i = 0; i < 3; i++) await knex.migrate.up();
    await knex.raw(
      `insert into gpu_instances (instance_id, market_instance_id, offer_id, status, gpu_info, cost_per_hour, template_name)
       values ('gpu-' || nextval('gpu_instance_id_seq'), 'm-1', 'offer-7', 'running_llm', '{"gpu_name":"RTX 4090","num_gpus":1}', 0.42, 'budget')`,
    );
    await knex("GpuExecutionLog").insert([
      { instance_id: "gpu-1001", operation: "create", success: true, metadata: { offer_id: "offer-7" } },
      { instance_id: "gpu-1001", operation: "status", success: true },
    ]);
    await knex.raw(
      `insert into "PR_GOODS_SEARCH_INTF" ("GOODS_NO", "GOODS_NM", "SALE_PRICE", "USE_YN", "INDEX_YN")
       select lpad(n::text, 10, '0'), '상품 ' || n, n * 10, case when n % 10 = 0 then 'N' else 'Y' end, 'Y' from generate_series(1, 2500) n`,
    );
  } finally {
    await knex.destroy();
    await server.stop();
    await db.close();
  }
}

describe("a DATA_DIR of the earlier PGlite default", () => {
  it("is imported into the embedded PostgreSQL at its first start, and its folder kept as pglite.imported", async () => {
    await writeEarlierDataDir();
    const database = await openDatabase({ databaseUrl: undefined, dataDir }, createLogger("silent"), { whenRunning: "refuse" });
    try {
      const { knex } = database;
      const instance = await knex("gpu_instances").first();
      expect(instance).toMatchObject({ instance_id: "gpu-1001", market_instance_id: "m-1", status: "running_llm", gpu_name: "RTX 4090", cost_per_hour: 0.42 });
      expect(instance.gpu_info).toEqual({ gpu_name: "RTX 4090", num_gpus: 1 });
      const logs = await knex("GpuExecutionLog").orderBy("id");
      expect(logs.map((l: { operation: string }) => l.operation)).toEqual(["create", "status"]);
      expect(logs[0].metadata).toEqual({ offer_id: "offer-7" });
      expect(await knex("PR_GOODS_SEARCH_INTF").count({ n: "*" }).first()).toEqual({ n: "2500" });
      expect(await knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "0000000007" }).first()).toMatchObject({ GOODS_NM: "상품 7", SALE_PRICE: 70, USE_YN: "Y" });

      // The sequences go on after the imported rows: no id is given twice.
      expect((await knex.raw("select nextval('gpu_instance_id_seq') as n")).rows[0].n).toBe("1002");
      const [added] = await knex("GpuExecutionLog").insert({ instance_id: "gpu-1001", operation: "destroy", success: true }).returning("id");
      expect(Number(added.id)).toBeGreaterThan(Number(logs[1].id));
    } finally {
      await database.close();
    }
    expect(existsSync(join(dataDir, "pglite"))).toBe(false);
    expect(existsSync(join(dataDir, "pglite.imported"))).toBe(true);

    // The next start finds nothing to import and keeps what it has.
    const again = await openDatabase({ databaseUrl: undefined, dataDir }, createLogger("silent"), { whenRunning: "refuse" });
    try {
      expect(await again.knex("GpuExecutionLog").count({ n: "*" }).first()).toEqual({ n: "3" });
    } finally {
      await again.close();
    }
  }, 180_000);
});
