import { startEmbeddedPostgres } from "../../src/db/embedded-postgres.js";

// A process that starts the embedded PostgreSQL of the DATA_DIR given as its argument, prints its
// URL and keeps it until killed: the other process of the embedded-postgres tests.

const embedded = await startEmbeddedPostgres(process.argv[2]!, { whenRunning: "refuse" });
process.stdout.write(`${embedded.url}\n`);
process.once("SIGTERM", () => void embedded.stop().then(() => process.exit(0)));
setInterval(() => {}, 60_000);
