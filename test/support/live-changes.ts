import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import { waitFor } from "./wait.js";

// Live indexing, seen from outside: the changes a shop commits (the realistic mix of
// bench:live and the live tests) and the comparison of the table with what search finds.

export type ChangeKind = "update" | "off_sale" | "new" | "delete";

export interface CommittedChange {
  kind: ChangeKind;
  goodsNo: string;
  /** After the commit: the product's document must be there (at least at `version`), or gone. */
  expect: "present" | "absent";
  /** The row's INDEX_VERSION after the change (present), or undefined (absent). */
  version?: string;
  committedAt: number;
}

/** Picks a change of the mix: ~80% price or name updates, 10% taken off sale, 5% new, 5% deletes. */
export function pickKind(random = Math.random()): ChangeKind {
  if (random < 0.8) return "update";
  if (random < 0.9) return "off_sale";
  if (random < 0.95) return "new";
  return "delete";
}

export function goodsNo(n: number): string {
  return `G${String(n).padStart(10, "0")}`;
}

/** A change to commit: `existing` is the product it changes, `fresh` the number a new product takes. */
export interface PlannedChange {
  kind: ChangeKind;
  existing: string;
  fresh: string;
}

type Returned = { GOODS_NO: string; INDEX_VERSION: string; USE_YN: string };

/** One set-based statement per kind, each returning the rows it changed. */
const STATEMENTS: Record<ChangeKind, string> = {
  update: `update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = "SALE_PRICE" + 100, "GOODS_NM" = left("GOODS_NM", 60) || '*', "USE_YN" = 'Y', "SYS_MOD_DTM" = now()
            where "GOODS_NO" = any(?) returning "GOODS_NO", "INDEX_VERSION", "USE_YN"`,
  off_sale: `update "PR_GOODS_SEARCH_INTF" set "USE_YN" = 'N', "SYS_MOD_DTM" = now() where "GOODS_NO" = any(?) returning "GOODS_NO", "INDEX_VERSION", "USE_YN"`,
  new: `insert into "PR_GOODS_SEARCH_INTF" ("GOODS_NO", "GOODS_NM", "BRAND_NM", "SALE_PRICE", "USE_YN")
          select no, '신상품 ' || no, '브랜드', 10000, 'Y' from unnest(?::text[]) as no
          on conflict ("GOODS_NO") do update set "USE_YN" = 'Y', "SYS_MOD_DTM" = now()
          returning "GOODS_NO", "INDEX_VERSION", "USE_YN"`,
  delete: `delete from "PR_GOODS_SEARCH_INTF" where "GOODS_NO" = any(?) returning "GOODS_NO", "INDEX_VERSION", 'N' as "USE_YN"`,
};

/**
 * Commits changes in one transaction (one statement per kind, in the order update, off_sale,
 * new, delete). Returns what search must show once they are applied, in that order, so that a
 * product changed twice ends with its last state; a product already gone returns nothing.
 */
export async function commitChanges(knex: Knex, planned: readonly PlannedChange[]): Promise<CommittedChange[]> {
  const kinds = (Object.keys(STATEMENTS) as ChangeKind[]).filter((kind) => planned.some((p) => p.kind === kind));
  const returned: Array<{ kind: ChangeKind; row: Returned }> = [];
  const run = async (db: Knex) => {
    for (const kind of kinds) {
      const numbers = planned.filter((p) => p.kind === kind).map((p) => (kind === "new" ? p.fresh : p.existing));
      const { rows } = await db.raw<{ rows: Returned[] }>(STATEMENTS[kind], [numbers]);
      for (const row of rows) returned.push({ kind, row });
    }
  };
  if (kinds.length === 1) await run(knex);
  else await knex.transaction(run);
  const committedAt = Date.now();
  return returned.map(({ kind, row }) => {
    const present = row.USE_YN === "Y";
    return { kind, goodsNo: row.GOODS_NO, expect: present ? "present" : "absent", version: present ? row.INDEX_VERSION : undefined, committedAt };
  });
}

/** Commits one change; undefined if the product it changes was gone. */
export async function commitChange(knex: Knex, kind: ChangeKind, existing: string, fresh: string): Promise<CommittedChange | undefined> {
  return (await commitChanges(knex, [{ kind, existing, fresh }]))[0];
}

/** Eligible rows: GOODS_NO -> INDEX_VERSION. */
export async function tableVersions(knex: Knex): Promise<Map<string, string>> {
  const { rows } = await knex.raw<{ rows: Array<{ GOODS_NO: string; INDEX_VERSION: string }> }>(
    `select "GOODS_NO", "INDEX_VERSION" from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`,
  );
  return new Map(rows.map((r) => [r.GOODS_NO, r.INDEX_VERSION]));
}

/** Documents searchable through the alias: _id -> _version, read in pages of 10,000. */
export async function indexVersions(es: Client, alias: string): Promise<Map<string, string>> {
  const versions = new Map<string, string>();
  let after: unknown[] | undefined;
  for (;;) {
    const page = await es.search({ index: alias, size: 10_000, _source: false, version: true, sort: [{ GOODS_NO: "asc" }], search_after: after as never });
    for (const hit of page.hits.hits) versions.set(hit._id as string, String(hit._version));
    if (page.hits.hits.length < 10_000) return versions;
    after = page.hits.hits.at(-1)?.sort;
  }
}

/** What differs between the table and search: missing, extra, or at another version. */
export function differences(table: Map<string, string>, index: Map<string, string>): { missing: string[]; extra: string[]; stale: string[] } {
  const missing: string[] = [];
  const stale: string[] = [];
  for (const [no, version] of table) {
    const found = index.get(no);
    if (found === undefined) missing.push(no);
    else if (found !== version) stale.push(no);
  }
  const extra = [...index.keys()].filter((no) => !table.has(no));
  return { missing, extra, stale };
}

export async function feedSize(knex: Knex): Promise<number> {
  const { rows } = await knex.raw<{ rows: Array<{ n: number }> }>(`select count(*)::int as n from goods_live_feed`);
  return rows[0]?.n ?? 0;
}

/**
 * Waits until the feed is empty and search shows exactly the eligible rows, each at its row's
 * version (no product missing, none extra, none older); throws with the differences otherwise.
 */
export async function waitUntilSearchMatchesTable(knex: Knex, es: Client, alias: string, timeoutMs = 30_000): Promise<void> {
  let last: ReturnType<typeof differences> | undefined;
  let versions: { table: Map<string, string>; index: Map<string, string> } | undefined;
  try {
    await waitFor(
      async () => {
        if ((await feedSize(knex)) > 0) return false;
        await es.indices.refresh({ index: alias });
        versions = { table: await tableVersions(knex), index: await indexVersions(es, alias) };
        last = differences(versions.table, versions.index);
        return last.missing.length + last.extra.length + last.stale.length === 0;
      },
      "search to match the table",
      timeoutMs,
      200,
    );
  } catch (err) {
    const sample = (list: string[]) =>
      `${list.length} (${list
        .slice(0, 5)
        .map((no) => `${no} table ${versions?.table.get(no) ?? "-"} search ${versions?.index.get(no) ?? "-"}`)
        .join(", ")})`;
    const stuck = await knex("goods_live_feed").orderBy("changed_at").limit(3).select("goods_no", "attempts", "last_error");
    const detail = `${last ? `missing ${sample(last.missing)}, extra ${sample(last.extra)}, stale ${sample(last.stale)}; ` : ""}feed ${await feedSize(knex)} ${JSON.stringify(stuck)}`;
    throw new Error(`${(err as Error).message}: ${detail}`);
  }
}
