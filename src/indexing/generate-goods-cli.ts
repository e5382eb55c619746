import { parseArgs } from "node:util";
import { createKnex, migrateToLatest } from "../db/knex.js";
import { generateGoods } from "./goods-generator.js";

// npm run generate:goods -- --rows N [--first N] [--truncate]
// Fills PR_GOODS_SEARCH_INTF of the database at DATABASE_URL with generated goods.

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { rows: { type: "string", default: "1000" }, first: { type: "string", default: "1" }, truncate: { type: "boolean", default: false } },
  });
  const rows = Number(values.rows);
  const first = Number(values.first);
  if (!Number.isInteger(rows) || rows < 0 || !Number.isInteger(first) || first < 1) throw new Error("--rows and --first must be whole numbers");
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error("DATABASE_URL must name the PostgreSQL database to fill");
  const knex = createKnex(url, { poolMax: 2 });
  try {
    await migrateToLatest(knex);
    if (values.truncate) await knex.raw(`truncate "PR_GOODS_SEARCH_INTF"`);
    const started = performance.now();
    const inserted = await generateGoods(knex, { rows, firstNo: first });
    process.stdout.write(`inserted ${inserted} goods rows in ${Math.round(performance.now() - started)} ms\n`);
  } finally {
    await knex.destroy();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`generate:goods failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
