import { InvalidInputError } from "../../errors.js";

// Opaque page tokens for the instance list: keyset pagination, so that instances created while
// a client pages never shift a page (OFFSET would repeat or skip rows). The token is base64url
// JSON; clients must treat it as opaque.

export const INSTANCE_SORT_KEYS = ["created_at", "cost_per_hour", "uptime"] as const;
export type InstanceSortKey = (typeof INSTANCE_SORT_KEYS)[number];

export interface PageToken {
  /** The listing this token continues: its sort key and status filter. */
  sortBy: InstanceSortKey;
  statusFilter: string;
  /** The instant uptimes are measured at, fixed by the first page so that the order holds. */
  asOf: string;
  /** Sort value (database text form) and instance_id of the last item returned. */
  after: [string, string];
}

export function encodePageToken(token: PageToken): string {
  return Buffer.from(JSON.stringify([1, token.sortBy, token.statusFilter, token.asOf, token.after])).toString("base64url");
}

/** Decodes a token and checks that it continues the listing that is asked for now. */
export function decodePageToken(text: string, sortBy: InstanceSortKey, statusFilter: string): PageToken {
  const invalid = (why: string) => new InvalidInputError(`page_token ${why}`, { extra: { field: "page_token" } });
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(text, "base64url").toString("utf8"));
  } catch {
    throw invalid("is not a token this service issued");
  }
  if (!isTokenTuple(parsed)) throw invalid("is not a token this service issued");
  const [, tokenSort, tokenFilter, asOf, after] = parsed;
  if (tokenSort !== sortBy || tokenFilter !== statusFilter) {
    throw invalid("belongs to a listing with another sort_by or status_filter");
  }
  return { sortBy, statusFilter, asOf, after };
}

function isTokenTuple(value: unknown): value is [1, InstanceSortKey, string, string, [string, string]] {
  if (!Array.isArray(value) || value.length !== 5 || value[0] !== 1) return false;
  const [, sortBy, filter, asOf, after] = value as unknown[];
  return (
    typeof sortBy === "string" &&
    (INSTANCE_SORT_KEYS as readonly string[]).includes(sortBy) &&
    typeof filter === "string" &&
    typeof asOf === "string" &&
    isIsoInstant(asOf) &&
    Array.isArray(after) &&
    after.length === 2 &&
    after.every((part) => typeof part === "string")
  );
}

/**
 * True for a UTC instant in the exact form toISOString writes, with `fractionDigits` digits of
 * seconds (up to 6, microseconds as PostgreSQL keeps them), that names a real calendar date from
 * year 1 on. Date.parse alone is too lenient: it takes "1" or February 30, which PostgreSQL refuses.
 */
export function isIsoInstant(text: string, fractionDigits = 3): boolean {
  const match = new RegExp(`^(\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3})\\d{${fractionDigits - 3}}Z$`).exec(text);
  if (!match || match[1]!.startsWith("0000")) return false;
  const millis = `${match[1]}Z`;
  const parsed = new Date(millis);
  return !Number.isNaN(parsed.getTime()) && parsed.toISOString() === millis;
}
