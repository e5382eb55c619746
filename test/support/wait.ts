/**
 * Polls `condition` until it holds: for tests that wait on a state another process or task
 * reaches, rather than sleeping for a guessed time. Fails naming `what` after `timeoutMs`.
 */
export async function waitFor(condition: () => Promise<boolean> | boolean, what: string, timeoutMs = 60_000, intervalMs = 20): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
