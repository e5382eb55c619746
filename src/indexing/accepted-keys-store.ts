import type { Knex } from "knex";
import type { GoodsKey } from "./goods-rows.js";

// The rows a cursor run read and Elasticsearch accepted, kept in the unlogged table
// goods_index_accepted (one run id per run) instead of process memory, and the finalize that
// flips exactly those rows to INDEX_YN='Y'.

const TABLE = "goods_index_accepted";
/** Rows per INSERT: keeps statements well under PostgreSQL's 65,535 bind parameters. */
const INSERT_CHUNK = 10_000;

export class AcceptedKeysStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): AcceptedKeysStore {
    return new AcceptedKeysStore(knex);
  }

  async record(runId: string, keys: readonly GoodsKey[]): Promise<void> {
    for (let i = 0; i < keys.length; i += INSERT_CHUNK) {
      const rows = keys.slice(i, i + INSERT_CHUNK).map((k) => ({ run_id: runId, goods_no: k.goodsNo, sys_mod_dtm: k.modDtm }));
      await this.knex(TABLE).insert(rows);
    }
  }

  /**
   * Flips INDEX_YN to 'Y' in one statement for the recorded rows whose SYS_MOD_DTM is still the
   * one that was read (compare-and-set): a row modified or re-flagged after it was read keeps 'N'
   * and is picked up by the next run. Returns the number of rows flipped.
   */
  async finalize(runId: string): Promise<number> {
    const result = await this.knex.raw<{ rowCount: number }>(
      `update "PR_GOODS_SEARCH_INTF" g
          set "INDEX_YN" = 'Y'
         from ${TABLE} a
        where a.run_id = ?
          and g."GOODS_NO" = a.goods_no
          and g."SYS_MOD_DTM" = a.sys_mod_dtm
          and g."USE_YN" = 'Y'
          and g."INDEX_YN" = 'N'`,
      [runId],
    );
    return result.rowCount;
  }

  /** Removes one run's keys, or every run's when the job lock guarantees none is active. */
  async clear(runId?: string): Promise<void> {
    if (runId === undefined) await this.knex.raw(`truncate ${TABLE}`);
    else await this.knex(TABLE).where({ run_id: runId }).delete();
  }
}
