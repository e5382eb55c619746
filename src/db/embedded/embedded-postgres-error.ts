/** A failure to start or reach the embedded PostgreSQL, with a message an operator can act on. */
export class EmbeddedPostgresError extends Error {}
