import type { Knex } from "knex";
import * as gpuInstances from "./20261121000000_gpu_instances.js";
import * as goodsSearchIntf from "./20261121000100_goods_search_intf.js";
import * as goodsSources from "./20261121000200_goods_sources.js";
import * as gpuInstanceMoney from "./20261122000000_gpu_instance_money.js";
import * as gpuMarketLabel from "./20261122000100_gpu_market_label.js";
import * as simMarketInstances from "./20261122000200_sim_market_instances.js";
import * as indexTruth from "./20261122000300_index_truth.js";
import * as goodsDropFullIndex from "./20261123000000_goods_drop_full_index.js";
import * as goodsLiveFeed from "./20261125000000_goods_live_feed.js";
import * as goodsLiveWakeIdle from "./20261125010000_goods_live_wake_idle.js";
import * as goodsLiveFeedDue from "./20261126000000_goods_live_feed_due.js";
import * as operationActor from "./20261126000000_operation_actor.js";
import * as gpuModelApiKey from "./20261126000100_gpu_model_api_key.js";
import * as gpuEndpoints from "./20261126010000_gpu_endpoints.js";
import * as gpuEndpointFaults from "./20261126020000_gpu_endpoint_faults.js";
import * as gpuEndpointAutoscale from "./20261126030000_gpu_endpoint_autoscale.js";
import * as gpuEndpointLoad from "./20261126030100_gpu_endpoint_load.js";
import * as gpuEndpointAutoscalerMemory from "./20261126030200_gpu_endpoint_autoscaler_memory.js";
import * as gpuInstanceBid from "./20261126040000_gpu_instance_bid.js";
import * as simMarketPreemption from "./20261126040100_sim_market_preemption.js";
import * as gpuInstanceMachine from "./20261126040200_gpu_instance_machine.js";
import * as gpuEndpointCapacity from "./20261126050000_gpu_endpoint_capacity.js";
import * as gpuEndpointMixBackoff from "./20261127010000_gpu_endpoint_mix_backoff.js";
import * as gpuEndpointHistory from "./20261128000000_gpu_endpoint_history.js";
import * as gpuInstanceBillingEnd from "./20261128011000_gpu_instance_billing_end.js";
import * as gpuEndpointMixWait from "./20261128020000_gpu_endpoint_mix_wait.js";
import * as gpuInstanceMarket from "./20261128030000_gpu_instance_market.js";
import * as gpuEndpointMarkets from "./20261128040000_gpu_endpoint_markets.js";
import * as gpuInstanceMarketOwnId from "./20261129010000_gpu_instance_market_own_id.js";
import * as gpuKeys from "./20261129020000_gpu_keys.js";
import * as gpuKeyLeases from "./20261129030000_gpu_key_leases.js";
import * as gpuEndpointRouting from "./20261129040000_gpu_endpoint_routing.js";
import * as gpuEndpointLoadCallers from "./20261129050000_gpu_endpoint_load_callers.js";

// Migrations are listed here, in order, rather than found on disk, so that they run the same
// under tsx, vitest and compiled output. A shipped migration is never edited: add a new one.
const MIGRATIONS: ReadonlyArray<readonly [string, Knex.Migration]> = [
  ["20261121000000_gpu_instances", gpuInstances],
  ["20261121000100_goods_search_intf", goodsSearchIntf],
  ["20261121000200_goods_sources", goodsSources],
  ["20261122000000_gpu_instance_money", gpuInstanceMoney],
  ["20261122000100_gpu_market_label", gpuMarketLabel],
  ["20261122000200_sim_market_instances", simMarketInstances],
  ["20261122000300_index_truth", indexTruth],
  ["20261123000000_goods_drop_full_index", goodsDropFullIndex],
  ["20261125000000_goods_live_feed", goodsLiveFeed],
  ["20261125010000_goods_live_wake_idle", goodsLiveWakeIdle],
  ["20261126000000_goods_live_feed_due", goodsLiveFeedDue],
  ["20261126000000_operation_actor", operationActor],
  ["20261126000100_gpu_model_api_key", gpuModelApiKey],
  ["20261126010000_gpu_endpoints", gpuEndpoints],
  ["20261126020000_gpu_endpoint_faults", gpuEndpointFaults],
  ["20261126030000_gpu_endpoint_autoscale", gpuEndpointAutoscale],
  ["20261126030100_gpu_endpoint_load", gpuEndpointLoad],
  ["20261126030200_gpu_endpoint_autoscaler_memory", gpuEndpointAutoscalerMemory],
  ["20261126040000_gpu_instance_bid", gpuInstanceBid],
  ["20261126040100_sim_market_preemption", simMarketPreemption],
  ["20261126040200_gpu_instance_machine", gpuInstanceMachine],
  ["20261126050000_gpu_endpoint_capacity", gpuEndpointCapacity],
  ["20261127010000_gpu_endpoint_mix_backoff", gpuEndpointMixBackoff],
  ["20261128000000_gpu_endpoint_history", gpuEndpointHistory],
  ["20261128011000_gpu_instance_billing_end", gpuInstanceBillingEnd],
  ["20261128020000_gpu_endpoint_mix_wait", gpuEndpointMixWait],
  ["20261128030000_gpu_instance_market", gpuInstanceMarket],
  ["20261128040000_gpu_endpoint_markets", gpuEndpointMarkets],
  ["20261129010000_gpu_instance_market_own_id", gpuInstanceMarketOwnId],
  ["20261129020000_gpu_keys", gpuKeys],
  ["20261129030000_gpu_key_leases", gpuKeyLeases],
  ["20261129040000_gpu_endpoint_routing", gpuEndpointRouting],
  ["20261129050000_gpu_endpoint_load_callers", gpuEndpointLoadCallers],
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
