import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { goodsQuery, removalQuery } from "../../../src/indexing/goods/goods-rows.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

// PostgreSQL writes every bulk item (goods-rows.ts). Its bytes must be the ones the service sent
// when it read the row's columns and serialised them itself: the index action with the row's
// external version, then JSON.stringify of the document's fields. Checked on generated goods
// and on values that need escaping.

let db: TestDatabase;

/** The document's columns as a pg client reads them, timestamps as RFC 3339 text. */
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;
const COLUMNS = `"GOODS_NO", "GOODS_NM", "BRAND_NM", "CATE_CD", "CATE_PATH", "SALE_PRICE", "PROMO_PRICE",
  "ICON_INFO", "IMG_URL", "USE_YN", "INDEX_YN",
  to_char("SYS_REG_DTM" at time zone 'UTC', ${ISO}) as "SYS_REG_DTM",
  to_char("SYS_MOD_DTM" at time zone 'UTC', ${ISO}) as "SYS_MOD_DTM"`;

/** What the service sent before PostgreSQL wrote the lines: built in JavaScript from the row. */
function serialisedInNode(row: Record<string, unknown> & { GOODS_NO: string; INDEX_VERSION: string }): string {
  const { INDEX_VERSION: version, ...document } = row;
  return `{"index":{"_id":${JSON.stringify(row.GOODS_NO)},"version":${version},"version_type":"external"}}\n${JSON.stringify(document)}\n`;
}

async function linesOf(sql: string): Promise<string[]> {
  const { rows } = await db.knex.raw<{ rows: Array<Record<string, string>> }>(sql);
  return rows.map((r) => Object.values(r)[0] as string);
}

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 2_000, unusedEvery: 0 });
  // Quotes, backslashes, every control character, non-ASCII and astral text, NULLs, a zero price.
  const controls = Array.from({ length: 32 }, (_, i) => String.fromCharCode(i)).join("").replace("\0", "");
  await db.knex("PR_GOODS_SEARCH_INTF").insert([
    { GOODS_NO: 'Q"1\\', GOODS_NM: `say "hi" \\ back\\slash ${controls} \u007f\u2028\u2029`, BRAND_NM: null, CATE_CD: null, CATE_PATH: null, SALE_PRICE: 0, PROMO_PRICE: null, ICON_INFO: null, IMG_URL: null },
    { GOODS_NO: "한글-1", GOODS_NM: "무선 이어폰 😀 </script>", BRAND_NM: "브랜드", CATE_CD: "C/1", CATE_PATH: "가>나>다", SALE_PRICE: 2_147_483_647, PROMO_PRICE: -1, ICON_INFO: "NEW,BEST", IMG_URL: "https://img.example/a b.jpg?x=1&y=2" },
  ]);
});

afterAll(async () => {
  await db?.drop();
});

describe("the goods document written by PostgreSQL", () => {
  it("is byte for byte what serialising the row in Node gave, for every row", async () => {
    const { rows } = await db.knex.raw(`select ${COLUMNS}, "INDEX_VERSION" from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`);
    const expected = new Map<string, string>(rows.map((r: Parameters<typeof serialisedInNode>[0]) => [r.GOODS_NO, serialisedInNode(r)]));
    const written = await linesOf(goodsQuery("full").sql);

    expect(written).toHaveLength(2_002);
    for (const lines of written) {
      const id = JSON.parse(lines.slice(0, lines.indexOf("\n"))).index._id as string;
      expect(lines).toBe(expected.get(id));
    }
    expect(written.filter((lines) => lines.includes("\\u0001") && lines.includes('\\"hi\\"'))).toHaveLength(1);
  });

  it("writes a delete at the row's version for a product taken off sale", async () => {
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "한글-1" }).update({ USE_YN: "N" });
    const [{ INDEX_VERSION: version }] = await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "한글-1" }).select("INDEX_VERSION");
    expect(await linesOf(removalQuery("cursor").sql)).toEqual([`{"delete":{"_id":"한글-1","version":${version},"version_type":"external"}}\n`]);
  });
});
