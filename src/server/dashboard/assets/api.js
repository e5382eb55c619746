// @ts-check
// The page's one way to the service's API: the token of this browser session (sessionStorage)
// on every call, and an error that says what went wrong in words a reader can act on.

const TOKEN_KEY = "dashboard-token";
/** How long one call may take before the page tells it failed. */
const CALL_TIMEOUT_MS = 20_000;

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

/** @param {string} value */
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  /** @param {number} status 0: the service did not answer. @param {string} detail */
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

/**
 * GET of one API path; the JSON answer, or an ApiError with the service's own detail.
 * @param {string} path
 * @returns {Promise<any>}
 */
export async function get(path) {
  const headers = token() ? { authorization: `Bearer ${token()}` } : undefined;
  let res;
  try {
    // A call that hangs would hold the page's next refresh: past this, it is told as failed.
    res = await fetch(path, { headers, cache: "no-store", signal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
  } catch (error) {
    if (error instanceof DOMException && error.name === "TimeoutError") throw new ApiError(0, `The service did not answer within ${CALL_TIMEOUT_MS / 1000} s.`);
    throw new ApiError(0, "The service did not answer. Is it running?");
  }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new ApiError(res.status, typeof body.detail === "string" ? body.detail : `${res.status} ${res.statusText}`);
  return body;
}
