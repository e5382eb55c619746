import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../src/config.js";
import { createKnex, migrateToLatest } from "../src/db/knex.js";
import { generateSources } from "../src/indexing/batch/source-generator.js";

// npm run generate:sources -- --goods 100000
// Replaces the batch's source tables in the database of DATABASE_URL with generated data.

const { values } = parseArgs({ options: { goods: { type: "string", default: "10000" } } });
const goods = Number(values.goods);
if (!Number.isInteger(goods) || goods < 1) {
  process.stderr.write(`--goods must be a positive integer, got '${values.goods}'\n`);
  process.exit(2);
}
let databaseUrl: string | undefined;
try {
  databaseUrl = loadConfig().databaseUrl;
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`configuration error: ${err.message}\n`);
  process.exit(2);
}
if (!databaseUrl) {
  process.stderr.write("DATABASE_URL must name the PostgreSQL database to fill\n");
  process.exit(2);
}
const knex = createKnex(databaseUrl);
try {
  await migrateToLatest(knex);
  const started = Date.now();
  await generateSources(knex, { goods });
  process.stdout.write(`generated ${goods} goods in ${Date.now() - started} ms\n`);
} finally {
  await knex.destroy();
}
