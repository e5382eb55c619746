import type { Knex } from "knex";

// Fills PR_GOODS_SEARCH_INTF with realistic goods: Korean brand and product names, a three-level
// category path, sale and promotion prices, icons and image URLs. Set-based: each statement
// inserts up to CHUNK rows from generate_series, so a million rows take seconds, not minutes.
// Values are derived from the row number, so the same arguments always give the same data.

const CHUNK = 250_000;

export interface GenerateGoodsOptions {
  /** Number of rows to insert. */
  rows: number;
  /** Number of the first row; GOODS_NO is 'G' + the number padded to 10 digits. */
  firstNo?: number;
  /** Every n-th row gets USE_YN='N' (default 10); 0 keeps every row 'Y'. */
  unusedEvery?: number;
}

const INSERT_SQL = `
with brands(list) as (select array['삼성전자','LG전자','나이키','아디다스','농심','오뚜기','CJ제일제당','아모레퍼시픽','무인양품','유니클로','필립스','다이슨','락앤락','쿠쿠','코웰','한샘']),
     items(list) as (select array['무선이어폰','운동화','라면 멀티팩','블루투스 스피커','후드티','전기밥솥','보조배터리','스킨케어 세트','밀폐용기','공기청정기','노트북 파우치','에어프라이어','러닝 반팔티','생수 2L','캡슐 커피','청소기']),
     adjectives(list) as (select array['프리미엄','베스트','특가','신상','한정판','대용량','초경량','올인원']),
     tops(list) as (select array['가전','패션','식품','뷰티','생활','디지털'])
insert into "PR_GOODS_SEARCH_INTF"
  ("GOODS_NO", "GOODS_NM", "BRAND_NM", "CATE_CD", "CATE_PATH", "SALE_PRICE", "PROMO_PRICE", "ICON_INFO", "IMG_URL",
   "USE_YN", "INDEX_YN", "SYS_REG_DTM", "SYS_MOD_DTM")
select 'G' || lpad(n::text, 10, '0'),
       b.list[1 + n % 16] || ' ' || a.list[1 + (n / 16) % 8] || ' ' || it.list[1 + (n / 7) % 16] || ' ' || (1 + n % 97) || '호',
       b.list[1 + n % 16],
       'C' || lpad((1 + (n / 3) % 120)::text, 4, '0'),
       t.list[1 + ((n / 3) % 120) % 6] || '>' || it.list[1 + (n / 7) % 16] || '>' || a.list[1 + (n / 16) % 8],
       price,
       case when n % 5 = 0 then (price * 0.9)::int / 10 * 10 end,
       case n % 4 when 0 then 'NEW' when 1 then 'BEST' when 2 then 'NEW,FREE_SHIPPING' else null end,
       'https://img.example.com/goods/' || (n % 1000) || '/G' || lpad(n::text, 10, '0') || '.jpg',
       case when ?::int > 0 and n % ?::int = 0 then 'N' else 'Y' end,
       'N',
       now() - make_interval(days => (30 + n % 365)::int),
       now() - make_interval(mins => (60 * 24 + n % (60 * 24 * 29))::int)
  from generate_series(?::bigint, ?::bigint) as n
       cross join lateral (select 1000 + ((n * 2654435761) % 4990) * 100 as price) p,
       brands b, items it, adjectives a, tops t`;

/** Inserts the rows and returns how many were inserted. */
export async function generateGoods(knex: Knex, options: GenerateGoodsOptions): Promise<number> {
  const { rows, firstNo = 1, unusedEvery = 10 } = options;
  if (!Number.isInteger(rows) || rows < 0) throw new RangeError(`rows must be a whole number >= 0, got ${rows}`);
  let inserted = 0;
  for (let from = firstNo; from < firstNo + rows; from += CHUNK) {
    const to = Math.min(from + CHUNK, firstNo + rows) - 1;
    const result = await knex.raw<{ rowCount: number }>(INSERT_SQL, [unusedEvery, unusedEvery, from, to]);
    inserted += result.rowCount;
  }
  return inserted;
}
