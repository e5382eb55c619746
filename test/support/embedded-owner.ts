import { startEmbeddedPostgres } from "../../src/db/embedded/embedded-postgres.js";

// A process that starts the embedded PostgreSQL of the DATA_DIR given as its argument, prints its
// URL and keeps it until killed: the other process of the embedded-postgres tests. A second
// argument "share" starts it as the sample-data commands do (beside a running service).

const whenRunning = process.argv[3] === "share" ? "share" : "refuse";
const embedded = await startEmbeddedPostgres(process.argv[2]!, { whenRunning });
process.stdout.write(`${embedded.url}\n`);
process.once("SIGTERM", () => void embedded.stop().then(() => process.exit(0)));
setInterval(() => {}, 60_000);
