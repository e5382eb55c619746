// vast.ai's query language as its API reference documents it: each filtered column takes an
// object of operators (eq, neq, gt, gte, lt, lte, in, notin); order is a list of column and
// direction. Unknown columns and operators are refused, so a misspelt filter fails a test.

type Row = Record<string, unknown>;

/** Keys of an offer search body that are not column filters. */
export const SEARCH_CONTROLS = new Set(["order", "limit", "type", "allocated_storage", "disable_bundling"]);

const OPERATORS: Record<string, (actual: unknown, wanted: unknown) => boolean> = {
  eq: (a, w) => a === w,
  neq: (a, w) => a !== w,
  gt: (a, w) => (a as number) > (w as number),
  gte: (a, w) => (a as number) >= (w as number),
  lt: (a, w) => (a as number) < (w as number),
  lte: (a, w) => (a as number) <= (w as number),
  in: (a, w) => Array.isArray(w) && w.includes(a),
  notin: (a, w) => Array.isArray(w) && !w.includes(a),
};

/** The rows matching every filter, or the message of a 400 when the query is not valid. */
export function matchesQuery(rows: Row[], filters: Row, controls: Set<string>): Row[] | string {
  const columns = new Set(rows.flatMap((r) => Object.keys(r)));
  const checks: Array<(row: Row) => boolean> = [];
  for (const [column, condition] of Object.entries(filters)) {
    if (controls.has(column)) continue;
    if (rows.length > 0 && !columns.has(column)) return `unknown column '${column}'`;
    if (typeof condition !== "object" || condition === null || Array.isArray(condition)) return `filter '${column}' must be an object of operators`;
    for (const [op, wanted] of Object.entries(condition)) {
      const test = OPERATORS[op];
      if (!test) return `unknown operator '${op}' on '${column}'`;
      checks.push((row) => test(row[column], wanted));
    }
  }
  return rows.filter((row) => checks.every((check) => check(row)));
}

export function sortRows(rows: Row[], order: Array<{ col?: unknown; dir?: unknown }>): Row[] {
  return [...rows].sort((a, b) => {
    for (const { col, dir } of order) {
      const x = Number(a[String(col)] ?? 0);
      const y = Number(b[String(col)] ?? 0);
      if (x !== y) return (x - y) * (dir === "desc" ? -1 : 1);
    }
    return Number(a.id) - Number(b.id);
  });
}
