// What the marketplace HTTP clients share when they retry: spread-out waits and a short reason
// for a call that never got an answer.

/** Half to full of the step, so that many clients backing off together spread out. */
export function jitter(ms: number): number {
  return Math.round(ms / 2 + (Math.random() * ms) / 2);
}

/** "unreachable", with the system's error code when there is one (ECONNREFUSED, ...). */
export function networkReason(err: unknown): string {
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
  const code = (cause as NodeJS.ErrnoException | undefined)?.code;
  return code ? `unreachable (${code})` : "unreachable";
}
