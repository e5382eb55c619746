import type { Knex } from "knex";

// Fills the batch's source tables with consistent, realistic-looking data of any size, in
// set-based SQL (generate_series), so a million goods take seconds and no memory in Node. The
// data is deterministic: goods number i always gets the same name, price, promotions, icons and
// category, so runs are reproducible.

const ROOTS = ["Fashion", "Beauty", "Food", "Living", "Digital"];
const CHILDREN = 4;
const LEAVES = 5;
const BRANDS = ["Aurora", "Bluebell", "Cedar", "Dawn", "Ember", "Fjord", "Gala", "Harbor", "Iris", "Juniper"];
const NOUNS = ["Jacket", "Serum", "Granola", "Lamp", "Earbuds", "Sneakers", "Tumbler", "Blanket", "Charger", "Tea"];

/** Goods numbers look like G000000042. */
export function goodsNo(i: number): string {
  return `G${String(i).padStart(9, "0")}`;
}

export interface GenerateOptions {
  /** How many goods (numbered 1..goods). */
  goods: number;
  /** "Now" of the generated promotions: active ones span it, expired ones end before it. */
  at?: Date;
}

/** Replaces the content of every source table with generated data. */
export async function generateSources(knex: Knex, options: GenerateOptions): Promise<void> {
  const at = options.at ?? new Date();
  const n = options.goods;
  await knex.transaction(async (trx) => {
    await trx.raw("truncate table goods_category_link, goods_icon, goods_promotion, goods_price, goods_master, goods_category");
    await insertCategories(trx);
    await trx.raw(INSERT_MASTER, { n, at, brands: pgArray(BRANDS), nouns: pgArray(NOUNS) });
    await trx.raw(INSERT_PRICES, { n, at });
    await trx.raw(INSERT_PROMOTIONS, { n, at });
    await trx.raw(INSERT_ICONS, { n, at });
    await trx.raw(INSERT_LINKS, { n, at, leaves: ROOTS.length * CHILDREN * LEAVES });
  });
}

/** A text[] literal; knex would expand a JavaScript array binding into a list of parameters. */
function pgArray(values: string[]): string {
  return `{${values.join(",")}}`;
}

/**
 * A three-level tree: 5 roots, 4 children each, 5 leaves each (C01, C0102, C010203). Every 7th
 * leaf is out of use, so that the batch's clean-up step has something to clean.
 */
async function insertCategories(trx: Knex.Transaction): Promise<void> {
  const rows: Array<{ cate_cd: string; cate_nm: string; parent_cate_cd: string | null; use_yn: string }> = [];
  const code = (...parts: number[]) => `C${parts.map((p) => String(p).padStart(2, "0")).join("")}`;
  let leafNumber = 0;
  ROOTS.forEach((root, r) => {
    rows.push({ cate_cd: code(r + 1), cate_nm: root, parent_cate_cd: null, use_yn: "Y" });
    for (let c = 1; c <= CHILDREN; c++) {
      rows.push({ cate_cd: code(r + 1, c), cate_nm: `${root} ${c}`, parent_cate_cd: code(r + 1), use_yn: "Y" });
      for (let l = 1; l <= LEAVES; l++) {
        leafNumber++;
        const useYn = leafNumber % 7 === 0 ? "N" : "Y";
        rows.push({ cate_cd: code(r + 1, c, l), cate_nm: `${root} ${c}-${l}`, parent_cate_cd: code(r + 1, c), use_yn: useYn });
      }
    }
  });
  await trx("goods_category").insert(rows);
}

// Every 50th goods is out of sale (USE_YN='N'); registration dates spread over about three years.
const INSERT_MASTER = `
insert into goods_master (goods_no, goods_nm, brand_nm, img_url, use_yn, sys_reg_dtm, sys_mod_dtm)
select 'G' || lpad(i::text, 9, '0'),
       (cast(:brands as text[]))[1 + i % 10] || ' ' || (cast(:nouns as text[]))[1 + (i / 10) % 10] || ' ' || i,
       (cast(:brands as text[]))[1 + i % 10],
       '/images/goods/' || lpad(i::text, 9, '0') || '.jpg',
       case when i % 50 = 0 then 'N' else 'Y' end,
       cast(:at as timestamptz) - make_interval(days => i % 1000),
       cast(:at as timestamptz) - interval '1 day'
  from generate_series(1, cast(:n as integer)) as i`;

// 1,000 to 100,500 in steps of 500, scattered over the goods numbers.
const INSERT_PRICES = `
insert into goods_price (goods_no, sale_price, sys_mod_dtm)
select 'G' || lpad(i::text, 9, '0'), 1000 + (i::bigint * 7919 % 200) * 500, cast(:at as timestamptz) - interval '1 day'
  from generate_series(1, cast(:n as integer)) as i`;

// Every 3rd goods has a promotion active at :at (80% of price), every 5th an expired one (50%),
// every 7th one that starts tomorrow (60%), every 15th a second active one (70%, the lowest wins).
const INSERT_PROMOTIONS = `
insert into goods_promotion (goods_no, promo_nm, promo_price, start_dtm, end_dtm, sys_mod_dtm)
select 'G' || lpad(i::text, 9, '0'), p.promo_nm, (1000 + (i::bigint * 7919 % 200) * 500) * p.pct / 100, cast(:at as timestamptz) + p.starts, cast(:at as timestamptz) + p.ends, cast(:at as timestamptz) - interval '1 day'
  from generate_series(1, cast(:n as integer)) as i
  join (values ('weekly deal', 3, 80, interval '-1 day', interval '7 days'),
               ('last season', 5, 50, interval '-30 days', interval '-20 days'),
               ('coming soon', 7, 60, interval '1 day', interval '8 days'),
               ('flash sale', 15, 70, interval '-1 hour', interval '1 day'))
       as p (promo_nm, every, pct, starts, ends)
    on i % p.every = 0`;

// NEW on every 4th goods, BEST on every 6th, FREE_SHIP on every 10th (out of use on every 20th).
const INSERT_ICONS = `
insert into goods_icon (goods_no, icon_cd, sort_seq, use_yn, sys_mod_dtm)
select 'G' || lpad(i::text, 9, '0'), icon.icon_cd, icon.sort_seq,
       case when icon.icon_cd = 'FREE_SHIP' and i % 20 = 0 then 'N' else 'Y' end, cast(:at as timestamptz) - interval '1 day'
  from generate_series(1, cast(:n as integer)) as i
  join (values ('NEW', 4, 1), ('BEST', 6, 2), ('FREE_SHIP', 10, 3)) as icon (icon_cd, every, sort_seq)
    on i % icon.every = 0`;

// One main link per goods to a leaf category; every 8th goods also has a secondary link.
const INSERT_LINKS = `
insert into goods_category_link (goods_no, cate_cd, main_yn, sys_mod_dtm)
select 'G' || lpad(i::text, 9, '0'), leaf.cate_cd, link.main_yn, cast(:at as timestamptz) - interval '1 day'
  from generate_series(1, cast(:n as integer)) as i
  join (values ('Y', 0), ('N', 37)) as link (main_yn, shift) on link.main_yn = 'Y' or i % 8 = 0
  join (select cate_cd, row_number() over (order by cate_cd) - 1 as k
          from goods_category where length(cate_cd) = 7) as leaf
    on leaf.k = (i + link.shift) % :leaves`;
