import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import { aliasState } from "./goods-index.js";

// Drift (SPEC.md section 3): how far the goods index is from the table. Eligible rows are those
// with USE_YN='Y'; after a refresh the index should hold exactly one document per eligible row.

export interface IndexDrift {
  alias: string;
  /** The physical index behind the alias; the alias itself for an older install's concrete index; "" when none. */
  physicalIndex: string;
  documentCount: number;
  eligibleRows: number;
  pendingRows: number;
  /** eligibleRows - documentCount. */
  drift: number;
}

export async function measureDrift(knex: Knex, client: Client, alias: string): Promise<IndexDrift> {
  const { rows } = await knex.raw<{ rows: Array<{ eligible: number; pending: number }> }>(
    `select count(*)::int as eligible, (count(*) filter (where "INDEX_YN" = 'N'))::int as pending
       from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`,
  );
  const eligibleRows = rows[0]?.eligible ?? 0;
  const pendingRows = rows[0]?.pending ?? 0;
  const state = await aliasState(client, alias);
  if (state.kind === "none") return { alias, physicalIndex: "", documentCount: 0, eligibleRows, pendingRows, drift: eligibleRows };
  await client.indices.refresh({ index: alias });
  const { count } = await client.count({ index: alias });
  const physicalIndex = state.kind === "alias" ? state.indices.join(",") : alias;
  return { alias, physicalIndex, documentCount: count, eligibleRows, pendingRows, drift: eligibleRows - count };
}
