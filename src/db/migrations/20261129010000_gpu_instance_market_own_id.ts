import type { Knex } from "knex";

// A record stores its market and the market's own id of its machine apart. Records written while
// several markets were configured hold `<market>:<id>` in market_instance_id: split here, so that
// every record's id is the market's own and its market is named, whatever MARKETPLACE says next.
// Records naming no market keep it empty: the first start names it (docs/marketplaces.md).

const MARKETS_THEN = ["vastai", "runpod", "simulated", "remote"];

export async function up(knex: Knex): Promise<void> {
  await knex.raw(
    `update gpu_instances
        set market = split_part(market_instance_id, ':', 1),
            market_instance_id = substr(market_instance_id, strpos(market_instance_id, ':') + 1)
      where split_part(market_instance_id, ':', 1) = any(?)
        and strpos(market_instance_id, ':') > 0
        and (market is null or market = split_part(market_instance_id, ':', 1))`,
    [MARKETS_THEN],
  );
}

export async function down(): Promise<void> {
  // Nothing to undo: the split ids are what the same machines are called with one market.
}
