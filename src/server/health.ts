import { sendJson, type NodeRequest, type NodeResponse } from "./node-http.js";

/** A readiness check resolves when its dependency answers and rejects (or times out) otherwise. */
export type ReadinessChecks = Record<string, () => Promise<void>>;

/**
 * What /readyz also reports, by key next to `status` and `checks` (e.g. `leadership`): information
 * about the process, never a reason to answer 503 (a standby is as ready as the leader).
 */
export type ReadinessDetails = Record<string, () => unknown>;

const CHECK_TIMEOUT_MS = 2000;

/** GET /healthz: the process is up. GET /readyz: every dependency answers. Never behind auth. */
export function createHealthHandler(checks: ReadinessChecks, details: ReadinessDetails = {}) {
  return async function handleHealth(req: NodeRequest, res: NodeResponse): Promise<boolean> {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    if (path === "/healthz") {
      sendJson(res, 200, { status: "ok" });
      return true;
    }
    if (path !== "/readyz") return false;
    const results = await Promise.all(
      Object.entries(checks).map(async ([name, check]) => [name, await runCheck(check)] as const),
    );
    const failed = results.filter(([, result]) => result !== "ok");
    const info = Object.fromEntries(Object.entries(details).map(([name, detail]) => [name, detail()]));
    const body = { status: failed.length === 0 ? "ready" : "not ready", checks: Object.fromEntries(results), ...info };
    sendJson(
      res,
      failed.length === 0 ? 200 : 503,
      failed.length === 0 ? body : { ...body, detail: `unreachable: ${failed.map(([name]) => name).join(", ")}` },
    );
    return true;
  };
}

async function runCheck(check: () => Promise<void>): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      check(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("timed out")), CHECK_TIMEOUT_MS);
      }),
    ]);
    return "ok";
  } catch {
    // The reason is not shown: this endpoint is open to anyone who can reach the port.
    return "unreachable";
  } finally {
    clearTimeout(timer);
  }
}
