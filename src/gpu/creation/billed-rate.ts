import { ResourceExhaustedError } from "../../errors.js";
import type { GpuContext } from "../gpu-context.js";
import { roundMoney } from "../money/cost.js";
import type { InstanceRecord } from "../store/instance-store.js";
import { ACTIVE_STATUSES } from "../store/status.js";

// The caps hold for what a created machine really bills, not only for the price its offer
// showed: a market may bill more than its catalogue said (RunPod's `cost` is the pod's own). Once
// the market tells the rate, the creation checks it against the endpoint's budget and the fleet
// cap, and destroys a machine over either with the error naming the cap.

/** For an endpoint's replica: what is left of the endpoint's max_cost_per_hour, $/h. */
export interface ReplicaBudget {
  endpoint: string;
  left: number;
}

/** Throws ResourceExhaustedError naming max_cost_per_hour when the rate (`billed`, $/h) breaks what is left of the budget. */
export function checkBudget(record: InstanceRecord, billed: number, budget: ReplicaBudget): void {
  const rate = roundMoney(billed);
  const left = roundMoney(budget.left);
  if (rate <= left) return;
  throw new ResourceExhaustedError(
    `The machine rented for ${record.instanceId} bills $${rate}/h, above the $${left}/h left of endpoint '${budget.endpoint}''s ` +
      `max_cost_per_hour (its offer '${record.offerId}' showed $${record.costPerHour}/h)`,
    { extra: { field: "max_cost_per_hour", endpoint: budget.endpoint, budget_left: left, offer_id: record.offerId, cost_per_hour: rate } },
  );
}

/** Throws ResourceExhaustedError naming GPU_MAX_FLEET_DPH when the rate with the other active instances' passes the cap. */
export async function checkFleetCap(ctx: Pick<GpuContext, "knex">, record: InstanceRecord, billed: number, cap: number | undefined): Promise<void> {
  if (cap === undefined) return;
  const spend = await activeSpendBeside(ctx, record.instanceId);
  // The sum rounded as the reservation rounds it (fleet-reservation.ts): a machine billing what its offer showed always passes.
  if (roundMoney(spend + billed) <= cap) return;
  const rate = roundMoney(billed);
  throw new ResourceExhaustedError(
    `The fleet cap GPU_MAX_FLEET_DPH of $${cap}/h leaves no room for the machine rented for ${record.instanceId}: it bills $${rate}/h ` +
      `(its offer '${record.offerId}' showed $${record.costPerHour}/h) and the other active instances cost $${roundMoney(spend)}/h`,
    { extra: { fleet_cap: cap, fleet_spend: roundMoney(spend), offer_id: record.offerId, cost_per_hour: rate } },
  );
}

/** Sum of cost_per_hour over the active records but this one, $/h. */
async function activeSpendBeside(ctx: Pick<GpuContext, "knex">, instanceId: string): Promise<number> {
  const row = (await ctx
    .knex("gpu_instances")
    .whereIn("status", [...ACTIVE_STATUSES])
    .whereNot("instance_id", instanceId)
    .sum({ spend: "cost_per_hour" })
    .first()) as { spend: number | string | null } | undefined;
  return Number(row?.spend ?? 0);
}
