// Domain errors are thrown below the service layer. One interceptor maps them to Connect codes
// (src/server/error-interceptor.ts) and the REST transcoder maps codes to HTTP statuses.

export type ErrorExtra = Record<string, string | number | boolean | null>;

export interface DomainErrorOptions {
  cause?: unknown;
  /** Extra keys for the REST error body, such as `field`, `code` or `batch_id`. */
  extra?: ErrorExtra;
}

export abstract class DomainError extends Error {
  readonly extra: ErrorExtra | undefined;

  constructor(message: string, options: DomainErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = new.target.name;
    this.extra = options.extra;
  }
}

/** Bad input: HTTP 400, Connect invalid_argument. */
export class InvalidInputError extends DomainError {}

/** A named resource does not exist: HTTP 404, Connect not_found. */
export class NotFoundError extends DomainError {}

/** The request conflicts with current state (offer rented meanwhile, job running): HTTP 409, Connect aborted. */
export class ConflictError extends DomainError {}

/** A configured bound (such as the fleet's spending cap) leaves no room: HTTP 429, Connect resource_exhausted. */
export class ResourceExhaustedError extends DomainError {}

/** A dependency (database, search engine, marketplace) is unreachable: HTTP 503, Connect unavailable. */
export class UnavailableError extends DomainError {}

/**
 * A call that must not be repeated (a create) got no answer, or a 5xx: it may or may not have
 * done its work. Whoever made it finds out (a marketplace create looks its machine up by label).
 */
export class OutcomeUnknownError extends UnavailableError {}

/**
 * A marketplace refused the account itself (a refused key, no balance: vast.ai's or RunPod's 401,
 * RunPod's 402): no other offer of that market can be rented until that changes. HTTP 503.
 */
export class MarketBlockedError extends UnavailableError {}

/** A failure the service detected and reports as such (HTTP 500), with a safe message. */
export class OperationFailedError extends DomainError {}

const EXCERPT_CHARS = 64;

/** A request value as error details may echo it: cut to a short prefix, so no input is echoed in full. */
export function excerpt(value: string): string {
  return value.length <= EXCERPT_CHARS ? value : `${value.slice(0, EXCERPT_CHARS)}... (${value.length} characters)`;
}

/** The text of any thrown value, for messages and logs. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
