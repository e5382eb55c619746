import type { Knex } from "knex";
import { ResourceExhaustedError } from "../../errors.js";
import { roundMoney } from "../money/cost.js";
import type { GpuContext } from "../gpu-context.js";
import { LIVE_PREDICATE, type InstanceRecord, type OfferFacts } from "../store/instance-store.js";
import type { Candidate } from "./bid-choice.js";
import { offerTaken } from "./offer-choice.js";
import { ACTIVE_STATUSES } from "../store/status.js";

// Choosing the offer and writing the creating record happen under one PostgreSQL advisory
// transaction lock, so that concurrent creates, in this process or in another replica on the
// same database, see each other's reservations: no two of them pick the same one-machine offer,
// and no two slip under the fleet cap together. A pool offer (a RunPod catalogue entry) is stock,
// not one machine: any number of live records rent it at once. The lock is held for two short statements, never across a
// marketplace call.

const RESERVATION_LOCK = "gpu_instances.reservation";

export interface Reservation {
  /** Offers in order of preference; one-machine offers held by a live record are skipped, pools never. */
  candidates: readonly Candidate[];
  /** GPU_MAX_FLEET_DPH; undefined: no cap. */
  fleetCap: number | undefined;
  /** Writes (inserts or retargets) the creating record for the chosen offer. */
  write(offer: OfferFacts, trx: Knex.Transaction): Promise<InstanceRecord | null>;
  /** The record being retargeted, left out of the held offers and of the spend. */
  instanceId: string;
}

export async function reserveOffer(ctx: Pick<GpuContext, "knex">, reservation: Reservation): Promise<InstanceRecord> {
  return ctx.knex.transaction(async (trx) => {
    await trx.raw("select pg_advisory_xact_lock(hashtext(?))", [RESERVATION_LOCK]);
    const fleet = await fleetOf(trx, reservation.instanceId);
    const offer = reservation.candidates.find((o) => o.pool === true || !fleet.heldOfferIds.has(o.id));
    if (!offer) throw offerTaken(reservation.candidates[0]!.id);
    const cap = reservation.fleetCap;
    if (cap !== undefined && roundMoney(fleet.spend + offer.dphTotal) > cap) {
      throw new ResourceExhaustedError(
        `The fleet cap GPU_MAX_FLEET_DPH of $${cap}/h leaves no room: active instances cost $${roundMoney(fleet.spend)}/h ` +
          `and offer '${offer.id}' costs $${offer.dphTotal}/h`,
        { extra: { fleet_cap: cap, fleet_spend: roundMoney(fleet.spend), offer_id: offer.id, cost_per_hour: offer.dphTotal } },
      );
    }
    const facts = {
      offerId: offer.id,
      gpuInfo: { gpuName: offer.gpuName, numGpus: offer.numGpus, gpuRam: offer.gpuRam },
      costPerHour: offer.dphTotal,
      bidPerHour: offer.bidPerHour ?? null,
      machineId: offer.machineId ?? null,
      market: offer.market ?? null,
    };
    const record = await reservation.write(facts, trx);
    if (!record) throw offerTaken(offer.id, "the creation was settled meanwhile");
    return record;
  });
}

interface Fleet {
  /** Offers live records rent or are about to rent. */
  heldOfferIds: Set<string>;
  /** Sum of cost_per_hour over active records, $/h. */
  spend: number;
}

async function fleetOf(trx: Knex.Transaction, exceptInstanceId: string): Promise<Fleet> {
  const { rows } = await trx.raw<{ rows: Array<{ held: string[]; spend: number }> }>(
    `select coalesce(array_agg(offer_id), '{}') as held,
            coalesce(sum(cost_per_hour) filter (where status = any(?::text[])), 0)::float8 as spend
     from gpu_instances
     where (${LIVE_PREDICATE}) and status not in ('destroyed', 'failed') and instance_id <> ?`,
    [[...ACTIVE_STATUSES], exceptInstanceId],
  );
  return { heldOfferIds: new Set(rows[0]!.held), spend: Number(rows[0]!.spend) };
}
