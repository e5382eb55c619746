import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { adminDatabaseUrl } from "./postgres.js";

// Runs once per test run. PostgreSQL must already be running (DATABASE_URL, default the local
// server); Elasticsearch is the one named by ELASTICSEARCH_URL or, when unset, a node that this
// setup starts from scripts/elasticsearch.sh on a free port and stops afterwards. A missing
// server fails the run loudly: no test is skipped for want of one.

const script = join(import.meta.dirname, "../../scripts/elasticsearch.sh");

export default async function setup(): Promise<() => void> {
  await checkPostgres();
  if (process.env.ELASTICSEARCH_URL) return () => {};

  const state = mkdtempSync(join(tmpdir(), "es-test-"));
  const env = { ...process.env, ES_STATE_DIR: state };
  const url = execFileSync("bash", [script, "start", "0"], { env, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
  process.env.ELASTICSEARCH_URL = url;
  return () => {
    execFileSync("bash", [script, "stop"], { env, stdio: "inherit" });
    rmSync(state, { recursive: true, force: true });
  };
}

async function checkPostgres(): Promise<void> {
  const client = new pg.Client({ connectionString: adminDatabaseUrl(), connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    await client.query("select 1");
  } catch (err) {
    throw new Error(`PostgreSQL is not reachable at ${adminDatabaseUrl()}: ${(err as Error).message}`);
  } finally {
    await client.end().catch(() => {});
  }
}
