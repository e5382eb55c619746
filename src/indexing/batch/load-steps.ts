import type { Knex } from "knex";

// Step 1 of the product batch and its follow-ups 1a-1d (docs/batch.md), one plain SQL statement
// each. Every statement that changes a goods row stamps SYS_MOD_DTM with the run time and sets
// INDEX_YN='N', and 1a-1d touch only rows whose value actually changes, so the cursor indexing
// of step 2 sends exactly the documents that differ from what the index holds.

/** Full load, part 1: empty the table (inside the caller's transaction, so a failure undoes it). */
const TRUNCATE_GOODS = `truncate table "PR_GOODS_SEARCH_INTF"`;

/**
 * A full load is followed by a rebuild that indexes every row it wrote: the live feed's triggers
 * stay out of it (otherwise the follower would index a million rows one batch at a time beside
 * the rebuild). Inside the load's transaction, which holds the truncate's exclusive lock until it
 * commits, so no other writer ever runs without them; the rows still draw their INDEX_VERSION.
 */
const PAUSE_LIVE_FEED = `alter table "PR_GOODS_SEARCH_INTF" disable trigger user`;
const RESUME_LIVE_FEED = `alter table "PR_GOODS_SEARCH_INTF" enable trigger user`;

/**
 * Full load: the table's secondary indexes (not those of its constraints), as the database
 * defines them. The full load drops them before its insert and builds each once afterwards, which
 * is much faster than maintaining them row by row; read here, so they stay what the migrations say.
 */
const SECONDARY_INDEXES = `
select indexname as name, indexdef as definition
  from pg_indexes i
 where i.schemaname = current_schema() and i.tablename = 'PR_GOODS_SEARCH_INTF'
   and not exists (select 1 from pg_constraint c where c.conname = i.indexname)`;

/** Each goods' lowest price among its promotions active at :at (1a, and the full load). */
const ACTIVE_PROMOTIONS = `
  select goods_no, min(promo_price) as promo_price
    from goods_promotion
   where use_yn = 'Y' and start_dtm <= :at and end_dtm > :at
   group by goods_no`;

/** Each goods' icon codes in use, comma-separated in display order (1b, and the full load). */
const ICONS_IN_USE = `
  select goods_no, string_agg(icon_cd, ',' order by sort_seq, icon_cd) as icon_info
    from goods_icon
   where use_yn = 'Y'
   group by goods_no`;

/** Each goods' main category, when that category is usable (1c, and the full load). */
const MAIN_CATEGORIES = `
  select l.goods_no, t.cate_cd, t.cate_path
    from goods_category_link l
    join goods_category_tree t on t.cate_cd = l.cate_cd
   where l.main_yn = 'Y' and t.usable`;

/**
 * Full load, part 2: one row per goods of the master that has a price, flagged for indexing,
 * with the values 1a-1c compute already in place. Writing each row once, instead of inserting it
 * and then rewriting it in three updates, is what makes a large load fast; 1a-1d still run over
 * the whole table afterwards and find nothing to change.
 */
const INSERT_ALL_GOODS = `
insert into "PR_GOODS_SEARCH_INTF"
  ("GOODS_NO", "GOODS_NM", "BRAND_NM", "SALE_PRICE", "PROMO_PRICE", "ICON_INFO", "CATE_CD", "CATE_PATH", "IMG_URL",
   "USE_YN", "INDEX_YN", "SYS_REG_DTM", "SYS_MOD_DTM")
select m.goods_no, m.goods_nm, m.brand_nm, p.sale_price, promo.promo_price, icons.icon_info, main.cate_cd, main.cate_path,
       m.img_url, m.use_yn, 'N', m.sys_reg_dtm, :at
  from goods_master m
  join goods_price p on p.goods_no = m.goods_no
  left join (${ACTIVE_PROMOTIONS}) promo on promo.goods_no = m.goods_no
  left join (${ICONS_IN_USE}) icons on icons.goods_no = m.goods_no
  left join (${MAIN_CATEGORIES}) main on main.goods_no = m.goods_no`;

/**
 * Incremental load: insert or update only the goods whose master or price row changed within
 * the last :minutes minutes before the run time. Promotions, icons and categories are not
 * looked at here: steps 1a-1d recompute them for the whole table anyway.
 */
const UPSERT_CHANGED_GOODS = `
insert into "PR_GOODS_SEARCH_INTF"
  ("GOODS_NO", "GOODS_NM", "BRAND_NM", "SALE_PRICE", "IMG_URL", "USE_YN", "INDEX_YN", "SYS_REG_DTM", "SYS_MOD_DTM")
select m.goods_no, m.goods_nm, m.brand_nm, p.sale_price, m.img_url, m.use_yn, 'N', m.sys_reg_dtm, :at
  from goods_master m
  join goods_price p on p.goods_no = m.goods_no
 where m.sys_mod_dtm >= :since
    or p.sys_mod_dtm >= :since
on conflict ("GOODS_NO") do update
   set "GOODS_NM" = excluded."GOODS_NM",
       "BRAND_NM" = excluded."BRAND_NM",
       "SALE_PRICE" = excluded."SALE_PRICE",
       "IMG_URL" = excluded."IMG_URL",
       "USE_YN" = excluded."USE_YN",
       "INDEX_YN" = 'N',
       "SYS_MOD_DTM" = excluded."SYS_MOD_DTM"`;

/** 1a: PROMO_PRICE is the lowest price among the goods' promotions active at the run time, else null. */
const UPDATE_PROMOTION_PRICES = `
with active as (${ACTIVE_PROMOTIONS}
), wanted as (
  select g."GOODS_NO" as goods_no, active.promo_price
    from "PR_GOODS_SEARCH_INTF" g
    left join active on active.goods_no = g."GOODS_NO"
)
update "PR_GOODS_SEARCH_INTF" g
   set "PROMO_PRICE" = wanted.promo_price, "INDEX_YN" = 'N', "SYS_MOD_DTM" = :at
  from wanted
 where wanted.goods_no = g."GOODS_NO"
   and g."PROMO_PRICE" is distinct from wanted.promo_price`;

/** 1b: ICON_INFO is the goods' icon codes in use, comma-separated in display order, else null. */
const UPDATE_ICONS = `
with icons as (${ICONS_IN_USE}
), wanted as (
  select g."GOODS_NO" as goods_no, icons.icon_info
    from "PR_GOODS_SEARCH_INTF" g
    left join icons on icons.goods_no = g."GOODS_NO"
)
update "PR_GOODS_SEARCH_INTF" g
   set "ICON_INFO" = wanted.icon_info, "INDEX_YN" = 'N', "SYS_MOD_DTM" = :at
  from wanted
 where wanted.goods_no = g."GOODS_NO"
   and g."ICON_INFO" is distinct from wanted.icon_info`;

/** 1c: CATE_CD and CATE_PATH come from the goods' main category link, when that category is usable. */
const UPDATE_CATEGORIES = `
with main as (${MAIN_CATEGORIES}
)
update "PR_GOODS_SEARCH_INTF" g
   set "CATE_CD" = main.cate_cd, "CATE_PATH" = main.cate_path, "INDEX_YN" = 'N', "SYS_MOD_DTM" = :at
  from main
 where main.goods_no = g."GOODS_NO"
   and (g."CATE_CD", g."CATE_PATH") is distinct from (main.cate_cd, main.cate_path)`;

/**
 * 1d: clears the category of rows whose category is gone, out of use (itself or an ancestor),
 * or no longer the goods' main category, which 1c cannot see because it only joins what exists.
 */
const CLEAN_UP_CATEGORIES = `
update "PR_GOODS_SEARCH_INTF" g
   set "CATE_CD" = null, "CATE_PATH" = null, "INDEX_YN" = 'N', "SYS_MOD_DTM" = :at
 where (g."CATE_CD" is not null or g."CATE_PATH" is not null)
   and not exists (
     select 1
       from goods_category_link l
       join goods_category_tree t on t.cate_cd = l.cate_cd
      where l.goods_no = g."GOODS_NO" and l.cate_cd = g."CATE_CD" and l.main_yn = 'Y' and t.usable
   )`;

export type LoadStepName = "1-truncate" | "1-load" | "1-reindex" | "1a-promotion-prices" | "1b-icons" | "1c-categories" | "1d-category-clean-up";

export interface LoadOptions {
  /** The run time: promotions active at this instant, and SYS_MOD_DTM of every row written. */
  at: Date;
  /** Absent: full load. Present: only goods whose master or price changed in the last N minutes. */
  intervalMinutes?: number;
}

export interface LoadResult {
  isFullLoad: boolean;
  /** Rows inserted or updated by step 1. */
  loadedCount: number;
  /** Rows each of steps 1a-1d changed. */
  changed: Record<"promotionPrices" | "icons" | "categories" | "categoryCleanUp", number>;
  /** How long each statement took, in ms: where a slow batch spends its time. */
  stepMs: Partial<Record<LoadStepName, number>>;
}

/** A load statement failed; `step` names which one. */
export class LoadStepError extends Error {
  constructor(
    readonly step: LoadStepName,
    cause: unknown,
  ) {
    super(`load step ${step} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = "LoadStepError";
  }
}

/**
 * Runs step 1 and steps 1a-1d in one transaction: either the table holds the complete new load
 * or, on any failure, exactly what it held before.
 */
export async function loadGoods(knex: Knex, options: LoadOptions): Promise<LoadResult> {
  const { at, intervalMinutes } = options;
  const isFullLoad = intervalMinutes === undefined;
  const stepMs: LoadResult["stepMs"] = {};
  return knex.transaction(async (trx) => {
    const run = async (step: LoadStepName, sql: string, bindings: Record<string, unknown> = { at }) => {
      const started = performance.now();
      const rows = await runStep(trx, step, sql, bindings);
      stepMs[step] = Math.round(performance.now() - started);
      return rows;
    };
    let loadedCount: number;
    if (isFullLoad) {
      await trx.raw(PAUSE_LIVE_FEED);
      await run("1-truncate", TRUNCATE_GOODS, {});
      const indexes = (await trx.raw<{ rows: Array<{ name: string; definition: string }> }>(SECONDARY_INDEXES)).rows;
      for (const { name } of indexes) await trx.raw("drop index ??", [name]);
      loadedCount = await run("1-load", INSERT_ALL_GOODS);
      await run("1-reindex", indexes.map((index) => `${index.definition};`).join("\n"), {});
    } else {
      const since = new Date(at.getTime() - intervalMinutes * 60_000);
      loadedCount = await run("1-load", UPSERT_CHANGED_GOODS, { at, since });
    }
    const result: LoadResult = {
      isFullLoad,
      loadedCount,
      changed: {
        promotionPrices: await run("1a-promotion-prices", UPDATE_PROMOTION_PRICES),
        icons: await run("1b-icons", UPDATE_ICONS),
        categories: await run("1c-categories", UPDATE_CATEGORIES),
        categoryCleanUp: await run("1d-category-clean-up", CLEAN_UP_CATEGORIES),
      },
      stepMs,
    };
    if (isFullLoad) await trx.raw(RESUME_LIVE_FEED);
    return result;
  });
}

async function runStep(trx: Knex.Transaction, step: LoadStepName, sql: string, bindings: Record<string, unknown>): Promise<number> {
  try {
    // Without bindings the SQL goes as it is: index definitions carry casts such as 'Y'::text.
    const result = await (Object.keys(bindings).length > 0 ? trx.raw<{ rowCount: number | null }>(sql, bindings as Knex.ValueDict) : trx.raw(sql));
    return result.rowCount ?? 0;
  } catch (err) {
    throw new LoadStepError(step, err);
  }
}
