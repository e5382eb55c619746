import type { Knex } from "knex";
import * as gpuInstances from "./20261121000000_gpu_instances.js";
import * as goodsSearchIntf from "./20261121000100_goods_search_intf.js";
import * as goodsSources from "./20261121000200_goods_sources.js";
import * as indexTruth from "./20261122000000_index_truth.js";

// Migrations are listed here, in order, rather than found on disk, so that they run the same
// under tsx, vitest and compiled output. A shipped migration is never edited: add a new one.
const MIGRATIONS: ReadonlyArray<readonly [string, Knex.Migration]> = [
  ["20261121000000_gpu_instances", gpuInstances],
  ["20261121000100_goods_search_intf", goodsSearchIntf],
  ["20261121000200_goods_sources", goodsSources],
  ["20261122000000_index_truth", indexTruth],
];

export const migrationSource: Knex.MigrationSource<string> = {
  getMigrations: async () => MIGRATIONS.map(([name]) => name),
  getMigrationName: (name) => name,
  getMigration: async (name) => {
    const found = MIGRATIONS.find(([candidate]) => candidate === name);
    if (!found) throw new Error(`unknown migration ${name}`);
    return found[1];
  },
};
