import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../src/config.js";
import { openDatabase } from "../src/db/database.js";
import { generateSources } from "../src/indexing/batch/source-generator.js";
import { createLogger } from "../src/logger.js";

// npm run generate:sources -- --goods 100000
// Replaces the batch's source tables in the service's database with generated data: DATABASE_URL,
// or, when it is unset, the embedded PostgreSQL of DATA_DIR (the running service's, or started here).

const { values } = parseArgs({ options: { goods: { type: "string", default: "10000" } } });
const goods = Number(values.goods);
if (!Number.isInteger(goods) || goods < 1) {
  process.stderr.write(`--goods must be a positive integer, got '${values.goods}'\n`);
  process.exit(2);
}
let config;
try {
  config = loadConfig();
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`configuration error: ${err.message}\n`);
  process.exit(2);
}
const database = await openDatabase(config, createLogger("warn"), { whenRunning: "share" });
try {
  const started = Date.now();
  await generateSources(database.knex, { goods });
  process.stdout.write(`generated ${goods} goods into ${database.description} in ${Date.now() - started} ms\n`);
} finally {
  await database.close();
}
