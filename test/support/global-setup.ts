import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { adminDatabaseUrl } from "./postgres.js";
import { startTestPostgres } from "./test-postgres.js";

// Runs once per test run. PostgreSQL is the server named by DATABASE_URL or, when unset, the
// project's embedded PostgreSQL, started here for the run (test-postgres.ts) and handed to every
// test file and spawned service as DATABASE_URL. Elasticsearch is the one named by
// ELASTICSEARCH_URL or, when unset, a node that this setup starts from scripts/elasticsearch.sh on
// a free port. Both are stopped afterwards. A server that cannot be reached fails the run loudly:
// no test is skipped for want of one.

const script = join(import.meta.dirname, "../../scripts/elasticsearch.sh");

export default async function setup(): Promise<() => Promise<void>> {
  const teardowns: Array<() => Promise<void> | void> = [];
  const teardown = async () => {
    for (const step of teardowns.reverse()) await step();
  };
  try {
    if (!process.env.DATABASE_URL) {
      const postgres = await startTestPostgres();
      process.env.DATABASE_URL = postgres.url;
      process.env.TEST_POSTGRES_DATA_DIR = postgres.dataDir;
      teardowns.push(async () => {
        delete process.env.DATABASE_URL;
        delete process.env.TEST_POSTGRES_DATA_DIR;
        await postgres.stop();
      });
      console.log(`PostgreSQL for the tests: the embedded server on port ${new URL(postgres.url).port} (DATABASE_URL unset)`);
    }
    await checkPostgres();
    if (!process.env.ELASTICSEARCH_URL) teardowns.push(startElasticsearch());
  } catch (err) {
    await teardown();
    throw err;
  }
  return teardown;
}

/** Starts a node for the run, sets ELASTICSEARCH_URL, and returns how to stop it. */
function startElasticsearch(): () => void {
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
