import { startTestPostgres } from "./test-postgres.js";

// A stand-in for a vitest run: starts the test run's PostgreSQL, prints its URL and DATA_DIR as
// one JSON line, and ends on SIGINT or SIGTERM as vitest does (process.exit, no teardown).

const postgres = await startTestPostgres();
process.stdout.write(`${JSON.stringify({ url: postgres.url, dataDir: postgres.dataDir })}\n`);
for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => process.exit(130));
setInterval(() => {}, 60_000);
