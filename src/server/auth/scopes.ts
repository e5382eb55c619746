// What a token may do (SPEC.md section 4, "Who may do what"). A token holds a set of these; each
// RPC and each non-RPC HTTP route needs exactly one (scope-table.ts).

export const SCOPES = ["gpu:read", "gpu:write", "endpoints:invoke", "indexing:read", "indexing:run", "ops:read"] as const;

export type Scope = (typeof SCOPES)[number];

export function isScope(value: unknown): value is Scope {
  return typeof value === "string" && (SCOPES as readonly string[]).includes(value);
}
