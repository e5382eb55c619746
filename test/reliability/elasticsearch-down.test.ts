import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createElasticsearchClient } from "../../src/elasticsearch-client.js";
import { captureLogLines } from "../support/log-lines.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";

// Elasticsearch refusing connections (nothing listens on its port): the indexing routes answer
// 503 within about a second, through the production client with its retries, and the failure is
// logged at warn, without a stack trace.

const { logger, lines } = captureLogLines();
const es = createElasticsearchClient("http://127.0.0.1:9");
let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startTestServer({ knex: db.knex, elasticsearch: es, logger, env: { DATABASE_URL: db.url } });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
  await es.close();
});

describe("Elasticsearch unreachable", () => {
  it.each([
    ["full", "/api/search/v1/index/db/goods"],
    ["cursor", "/api/search/v1/index/db/goods?interval=1"],
  ])("answers the %s indexing route 503 within about a second, logged at warn without a stack", async (_mode, path) => {
    lines.length = 0;
    const started = Date.now();
    const res = await fetch(`${server.url}${path}`);
    const elapsed = Date.now() - started;
    expect(res.status).toBe(503);
    expect(((await res.json()) as { detail: string }).detail).toMatch(/Elasticsearch/i);
    // Two retries wait at most 0.6 s together; the rest is slack for a loaded machine.
    expect(elapsed).toBeLessThan(1_500);
    expect(lines.filter((line) => (line.level as number) >= 50)).toEqual([]);
    expect(lines.some((line) => line.level === 40)).toBe(true);
    expect(JSON.stringify(lines)).not.toContain("stack");
  });
});
