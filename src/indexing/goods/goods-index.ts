import { errors, type Client, type estypes } from "@elastic/elasticsearch";
import type { Logger } from "pino";
import type { GoodsAnalyzer } from "../../config.js";
import { UnavailableError } from "../../errors.js";
import { kstTimestamp } from "../kst-timestamp.js";
import { IndexingError, isUnreachable } from "../indexing-error.js";

// The goods index: GOODS_INDEX is an alias over one physical index `<alias>_<yyyyMMddHHmmss KST>`
// with the explicit mapping. Field names are the column names of PR_GOODS_SEARCH_INTF, so a
// document reads like its row. A rebuild fills a new physical index and moves the alias to it in
// one atomic call; searches never see a partial index.

/** The goods mapping; the Korean text fields use the configured analyzer. */
export function goodsMapping(analyzer: GoodsAnalyzer = "cjk"): estypes.MappingTypeMapping {
  const text = (ignoreAbove: number): estypes.MappingProperty => ({ type: "text", analyzer, fields: { keyword: { type: "keyword", ignore_above: ignoreAbove } } });
  return {
    dynamic: "strict",
    properties: {
      GOODS_NO: { type: "keyword" },
      GOODS_NM: text(256),
      BRAND_NM: text(256),
      CATE_CD: { type: "keyword" },
      CATE_PATH: text(512),
      SALE_PRICE: { type: "long" },
      PROMO_PRICE: { type: "long" },
      ICON_INFO: { type: "keyword" },
      IMG_URL: { type: "keyword", index: false },
      USE_YN: { type: "keyword" },
      INDEX_YN: { type: "keyword" },
      SYS_REG_DTM: { type: "date" },
      SYS_MOD_DTM: { type: "date" },
    },
  };
}

/**
 * Settings while a rebuild writes: no refreshes, no replicas to keep in step, no fsync per
 * request; and deletes remembered for the whole build. The live follower writes every change
 * committed after the rebuild's snapshot into the build index too; the rebuild may then send an
 * older state of a deleted product minutes later, and only a delete's remembered version refuses
 * it (Elasticsearch forgets it after index.gc_deletes, 60 s by default).
 */
export const OPTIMIZED: estypes.IndicesIndexSettings = { refresh_interval: "-1", number_of_replicas: 0, translog: { durability: "async" }, gc_deletes: "12h" };
/** Settings a live index always has. */
const RESTORED: estypes.IndicesIndexSettings = { refresh_interval: "1s", number_of_replicas: 1, translog: { durability: "request" }, gc_deletes: "60s" };

/**
 * The alias of the one build index in progress, if any: the live follower writes through it, so
 * that a build deleted meanwhile is never re-created by an upsert (require_alias); deletes are
 * kept from racing it by build-lock.ts.
 */
export function buildingAlias(alias: string): string {
  return `${alias}_building`;
}

/**
 * Whether a rebuild's index is filling now (its building alias exists). A GET, not a HEAD
 * (existsAlias): the HTTP client closes the connection after every HEAD, and the live follower
 * asks on every pass; a new connection each time cost more CPU than the rest of a small pass.
 */
export async function buildInProgress(client: Client, alias: string): Promise<boolean> {
  const { statusCode } = await client.indices.getAlias({ name: buildingAlias(alias) }, { ignore: [404], meta: true });
  return statusCode === 200;
}

/** Where the alias name points: physical indices, a concrete index of that name (older install), or nothing. */
export type AliasState = { kind: "alias"; indices: string[] } | { kind: "concrete" } | { kind: "none" };

export async function aliasState(client: Client, alias: string): Promise<AliasState> {
  return unreachableAs503(alias, async () => {
    if (await client.indices.existsAlias({ name: alias })) {
      return { kind: "alias", indices: Object.keys(await client.indices.getAlias({ name: alias })) };
    }
    return (await client.indices.exists({ index: alias })) ? { kind: "concrete" } : { kind: "none" };
  });
}

/**
 * Cursor and incremental runs write through the alias: creates a first physical index behind it
 * when neither alias nor index exists. An older install's concrete index is written as it is.
 */
export async function ensureGoodsAlias(client: Client, alias: string, analyzer: GoodsAnalyzer, logger: Logger): Promise<void> {
  await unreachableAs503(alias, async () => {
    for (;;) {
      if ((await aliasState(client, alias)).kind !== "none") return;
      try {
        const index = await freshName(client, alias);
        await createWithAnalyzer(client, { index, settings: { index: RESTORED }, aliases: { [alias]: {} } }, analyzer, logger);
        return;
      } catch (err) {
        // The name was taken between the check and the create (another process's first index, a
        // rebuild's build index): look at the alias again.
        if (!alreadyExists(err)) throw err;
      }
    }
  });
}

/** Creates the physical index a rebuild fills, tuned for bulk loading. */
export async function createBuildIndex(client: Client, alias: string, analyzer: GoodsAnalyzer, logger: Logger): Promise<string> {
  for (;;) {
    const index = await unreachableAs503(alias, () => freshName(client, alias));
    try {
      await createWithAnalyzer(client, { index, settings: { index: OPTIMIZED }, aliases: { [buildingAlias(alias)]: {} } }, analyzer, logger);
      return index;
    } catch (err) {
      // The live follower created the alias's first index under the same second's name: the next one.
      if (alreadyExists(err)) continue;
      throw new IndexingError("OPTIMIZE_FAILED", `creating index '${index}' for bulk loading failed`, { cause: err, unavailable: isUnreachable(err) });
    }
  }
}

function alreadyExists(err: unknown): boolean {
  return err instanceof errors.ResponseError && err.body?.error?.type === "resource_already_exists_exception";
}

/**
 * Creates an index with the goods mapping. A cluster without the analyzer's module or plugin
 * (cjk lives in analysis-common, nori in analysis-nori) gets the standard analyzer and a warning,
 * rather than no index at all: searching whole words beats searching nothing.
 */
async function createWithAnalyzer(
  client: Client,
  request: Omit<estypes.IndicesCreateRequest, "mappings">,
  analyzer: GoodsAnalyzer,
  logger: Logger,
): Promise<void> {
  try {
    await client.indices.create({ ...request, mappings: goodsMapping(analyzer) });
  } catch (err) {
    const missing = err instanceof errors.ResponseError && /analyzer \[\w+\] has not been configured/.test(JSON.stringify(err.body ?? ""));
    if (!missing || analyzer === "standard") throw err;
    logger.warn({ analyzer, physical_index: request.index }, "the cluster does not provide this analyzer; the index uses the standard analyzer");
    await client.indices.create({ ...request, mappings: goodsMapping("standard") });
  }
}

/** Restores live settings on a filled build index and refreshes it, before it goes live. */
export async function restoreBuildIndex(client: Client, index: string): Promise<void> {
  try {
    await client.indices.putSettings({ index, settings: { index: RESTORED } });
    await client.indices.refresh({ index });
  } catch (err) {
    throw new IndexingError("OPTIMIZE_FAILED", `restoring refresh_interval 1s and replicas 1 on '${index}' failed`, {
      cause: err,
      unavailable: isUnreachable(err),
    });
  }
}

/**
 * Points the alias at `index` in one atomic `_aliases` call (replacing a concrete index of the
 * alias's name in the same call), then deletes the previous physical indices.
 */
export async function swapAlias(client: Client, alias: string, index: string): Promise<string[]> {
  let previous: string[] = [];
  try {
    const state = await aliasState(client, alias);
    previous = state.kind === "alias" ? state.indices.filter((name) => name !== index) : [];
    // The build stops being one in the same atomic call that makes it live.
    const actions: object[] = [{ add: { index, alias } }, { remove: { index, alias: buildingAlias(alias), must_exist: false } }];
    if (state.kind === "concrete") actions.push({ remove_index: { index: alias } });
    for (const name of previous) actions.push({ remove: { index: name, alias } });
    await client.indices.updateAliases({ actions: actions as never });
  } catch (err) {
    throw new IndexingError("ALIAS_SWAP_FAILED", `moving alias '${alias}' to '${index}' failed`, { cause: err, unavailable: isUnreachable(err) });
  }
  if (previous.length > 0) await client.indices.delete({ index: previous, ignore_unavailable: true });
  return previous;
}

/** Deletes a build index that never went live. */
export async function deleteIndex(client: Client, index: string): Promise<void> {
  await client.indices.delete({ index, ignore_unavailable: true });
}

/**
 * Physical indices of the alias's naming pattern that the alias does not point to: partial
 * builds of a process that died; and an index named like the building alias, which a live delete
 * created when it raced a build going live before build-lock.ts (it would refuse every later
 * build its alias). Called under the job lock, so no build is in progress.
 */
export async function deleteLeftoverBuilds(client: Client, alias: string): Promise<string[]> {
  const state = await aliasState(client, alias);
  const live = state.kind === "alias" ? state.indices : [];
  const found = await unreachableAs503(alias, () => client.indices.get({ index: `${alias}_*`, expand_wildcards: ["open", "closed"], allow_no_indices: true }));
  const pattern = new RegExp(`^${alias.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}_(\\d{14}|building)$`);
  const leftovers = Object.keys(found).filter((name) => pattern.test(name) && !live.includes(name));
  if (leftovers.length > 0) await client.indices.delete({ index: leftovers, ignore_unavailable: true });
  return leftovers;
}

/** `<alias>_<yyyyMMddHHmmss KST>`; waits for the next second when this second's name is taken. */
async function freshName(client: Client, alias: string): Promise<string> {
  for (;;) {
    const name = `${alias}_${kstTimestamp(new Date()).slice(0, 14)}`;
    if (!(await client.indices.exists({ index: name }))) return name;
    await new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 5));
  }
}

async function unreachableAs503<T>(alias: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    if (isUnreachable(err)) throw new UnavailableError(`Elasticsearch is unreachable: cannot prepare index '${alias}'`, { cause: err });
    throw err;
  }
}
