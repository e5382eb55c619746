import { errors, type Client } from "@elastic/elasticsearch";
import { UnavailableError } from "../errors.js";
import { isUnreachable } from "./pipeline/bulk-sender.js";
import { IndexingError } from "./indexing-error.js";

// The goods index: explicit mapping, created when missing, and the settings dance of full mode.
// Field names are the column names of PR_GOODS_SEARCH_INTF, so a document reads like its row.

export const GOODS_MAPPING = {
  dynamic: "strict",
  properties: {
    GOODS_NO: { type: "keyword" },
    GOODS_NM: { type: "text", fields: { keyword: { type: "keyword", ignore_above: 256 } } },
    BRAND_NM: { type: "text", fields: { keyword: { type: "keyword", ignore_above: 256 } } },
    CATE_CD: { type: "keyword" },
    CATE_PATH: { type: "text", fields: { keyword: { type: "keyword", ignore_above: 512 } } },
    SALE_PRICE: { type: "long" },
    PROMO_PRICE: { type: "long" },
    ICON_INFO: { type: "keyword" },
    IMG_URL: { type: "keyword", index: false },
    USE_YN: { type: "keyword" },
    INDEX_YN: { type: "keyword" },
    SYS_REG_DTM: { type: "date" },
    SYS_MOD_DTM: { type: "date" },
  },
} as const;

/** Settings while a full run writes: no refreshes, no replicas to keep in step. */
const OPTIMIZED = { refresh_interval: "-1", number_of_replicas: 0 };
/** Settings the index is always left with. */
const RESTORED = { refresh_interval: "1s", number_of_replicas: 1 };

/** Creates the index with the goods mapping unless it exists. Unreachable: 503. */
export async function ensureGoodsIndex(client: Client, index: string): Promise<void> {
  try {
    if (await client.indices.exists({ index })) return;
    await client.indices.create({ index, mappings: GOODS_MAPPING, settings: RESTORED });
  } catch (err) {
    // Another process may have created it between the check and the create.
    if (err instanceof errors.ResponseError && err.body?.error?.type === "resource_already_exists_exception") return;
    if (isUnreachable(err)) throw new UnavailableError(`Elasticsearch is unreachable: cannot prepare index '${index}'`, { cause: err });
    throw err;
  }
}

export async function optimizeForBulk(client: Client, index: string): Promise<void> {
  try {
    await client.indices.putSettings({ index, settings: { index: OPTIMIZED } });
  } catch (err) {
    throw new IndexingError("OPTIMIZE_FAILED", `setting refresh_interval -1 and replicas 0 on '${index}' failed`, {
      cause: err,
      unavailable: isUnreachable(err),
    });
  }
}

/**
 * Puts back refresh 1s and replicas 1 when a full run left the index tuned for bulk loading
 * (killed, or its restore could not reach Elasticsearch). Called under the job lock, so no full
 * run is writing: refresh_interval -1 can only be such a leftover.
 */
export async function restoreIfLeftOptimized(client: Client, index: string): Promise<boolean> {
  const response = await client.indices.getSettings({ index, name: "index.refresh_interval" });
  if (response[index]?.settings?.index?.refresh_interval !== "-1") return false;
  await client.indices.putSettings({ index, settings: { index: RESTORED } });
  return true;
}

/** Puts back refresh 1s and replicas 1, then refreshes so that the run's documents are searchable. */
export async function restoreAfterBulk(client: Client, index: string): Promise<void> {
  await client.indices.putSettings({ index, settings: { index: RESTORED } });
  await client.indices.refresh({ index });
}
