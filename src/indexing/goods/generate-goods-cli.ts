import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../../config.js";
import { openDatabase } from "../../db/database.js";
import { createLogger } from "../../logger.js";
import { generateGoods } from "./goods-generator.js";

// npm run generate:goods -- --rows N [--first N] [--truncate]
// Fills PR_GOODS_SEARCH_INTF of the service's database with generated goods: DATABASE_URL, or,
// when it is unset, the embedded PostgreSQL of DATA_DIR (the running service's, or started here).

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { rows: { type: "string", default: "1000" }, first: { type: "string", default: "1" }, truncate: { type: "boolean", default: false } },
  });
  const rows = Number(values.rows);
  const first = Number(values.first);
  if (!Number.isInteger(rows) || rows < 0 || !Number.isInteger(first) || first < 1) throw new Error("--rows and --first must be whole numbers");
  const database = await openDatabase(loadConfig(), createLogger("warn"), { whenRunning: "share" });
  try {
    if (values.truncate) await database.knex.raw(`truncate "PR_GOODS_SEARCH_INTF"`);
    const started = performance.now();
    const inserted = await generateGoods(database.knex, { rows, firstNo: first });
    process.stdout.write(`inserted ${inserted} goods rows into ${database.description} in ${Math.round(performance.now() - started)} ms\n`);
  } finally {
    await database.close();
  }
}

main().catch((err: unknown) => {
  const prefix = err instanceof ConfigError ? "configuration error" : "generate:goods failed";
  process.stderr.write(`${prefix}: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
