import type { Knex } from "knex";
import { ConflictError } from "../../../errors.js";
import type { EventKind } from "./endpoint-events.js";

// An endpoint's replicas (table gpu_endpoint_replicas): one row per launch, written before its
// instance record exists, claimed in the transaction that writes that record, and kept once
// removed for the endpoint's total cost. Rows map to the records below here and nowhere else.
// Write methods take an optional transaction. The times the database stamps (created_at,
// draining_since, ...) are read on this process's clock (shifted by how far the two clocks are
// apart), so that the plan compares them with its own `now` and never one clock with another.

const REPLICAS = "gpu_endpoint_replicas";

export interface ReplicaKind {
  /** Rented as an interruptible bid. */
  interruptible: boolean;
  /** On-demand, rented in an interruptible slot because no bid fitted (never interruptible itself). */
  fallback: boolean;
  /** Launched to take this replica's place (a move of the mix: capacity-mix.ts); absent: an ordinary launch. */
  replaces?: string;
}

/** What the controller wrote down and observed about one replica. */
export interface ReplicaRow {
  instanceId: string;
  endpointId: string;
  draining: boolean;
  /** Consecutive successful readiness probes. */
  successes: number;
  /** Consecutive failed readiness probes. */
  failedProbes: number;
  readySince: Date | null;
  failingSince: Date | null;
  drainingSince: Date | null;
  condemnedAt: Date | null;
  /** Set while its instance record is written: from then on the row is never removed as a launch that never came. */
  recordClaimedAt: Date | null;
  /** The controller decided to destroy it; the event to write once the destroy is confirmed. */
  destroyingAt: Date | null;
  destroyEvent: { kind: EventKind; detail: string } | null;
  /** Rented as an interruptible bid. */
  interruptible: boolean;
  /** On-demand, rented in an interruptible slot because no bid fitted. */
  fallback: boolean;
  /** Launched to take this replica's place (a move of the mix); null: an ordinary launch. */
  replaces: string | null;
  createdAt: Date;
}

export type ReplicaProbeFields = Partial<Pick<ReplicaRow, "successes" | "failedProbes" | "readySince" | "failingSince">>;

interface ReplicaDbRow {
  instance_id: string;
  endpoint_id: string;
  draining: boolean;
  successes: number;
  failed_probes: number;
  ready_since: Date | null;
  failing_since: Date | null;
  draining_since: Date | null;
  condemned_at: Date | null;
  record_claimed_at: Date | null;
  destroying_at: Date | null;
  destroy_event: EventKind | null;
  destroy_detail: string | null;
  interruptible: boolean;
  fallback: boolean;
  replaces: string | null;
  created_at: Date;
  db_now: Date;
}

function toReplica(row: ReplicaDbRow, readAt: number): ReplicaRow {
  // The database's clock, shifted onto this process's.
  const shift = readAt - row.db_now.getTime();
  const local = (at: Date | null) => (at === null ? null : new Date(at.getTime() + shift));
  return {
    instanceId: row.instance_id,
    endpointId: String(row.endpoint_id),
    draining: row.draining,
    successes: row.successes,
    failedProbes: row.failed_probes,
    readySince: row.ready_since,
    failingSince: row.failing_since,
    drainingSince: local(row.draining_since),
    condemnedAt: local(row.condemned_at),
    recordClaimedAt: local(row.record_claimed_at),
    destroyingAt: local(row.destroying_at),
    destroyEvent: row.destroy_event ? { kind: row.destroy_event, detail: row.destroy_detail ?? "" } : null,
    interruptible: row.interruptible,
    fallback: row.fallback,
    replaces: row.replaces,
    createdAt: local(row.created_at)!,
  };
}

const PROBE_COLUMNS: Record<keyof ReplicaProbeFields, string> = {
  successes: "successes",
  failedProbes: "failed_probes",
  readySince: "ready_since",
  failingSince: "failing_since",
};

export class ReplicaStore {
  constructor(private readonly knex: Knex) {}

  /**
   * Writes down a replica about to be launched, before its instance record exists, with the kind
   * of machine it is to be rented as (on-demand when not given) and the replica it takes the place of.
   */
  async insert(endpointId: string, instanceId: string, trx?: Knex.Transaction, kind?: ReplicaKind): Promise<void> {
    await (trx ?? this.knex)(REPLICAS).insert({
      endpoint_id: endpointId,
      instance_id: instanceId,
      interruptible: kind?.interruptible ?? false,
      fallback: kind?.fallback ?? false,
      replaces: kind?.replaces ?? null,
    });
  }

  /** A replica launched as a bid was rented on-demand instead (no bid fitted): a fallback. */
  async markFallback(instanceId: string, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId }).update({ interruptible: false, fallback: true });
  }

  /** The replicas not removed, oldest first. */
  async listOf(endpointId: string): Promise<ReplicaRow[]> {
    const rows = await this.knex(REPLICAS)
      .where({ endpoint_id: endpointId })
      .whereNull("removed_at")
      .orderBy([{ column: "created_at" }, { column: "instance_id" }])
      .select(`${REPLICAS}.*`, this.knex.raw("clock_timestamp() as db_now"));
    const readAt = Date.now();
    return (rows as ReplicaDbRow[]).map((row) => toReplica(row, readAt));
  }

  async updateProbe(instanceId: string, fields: ReplicaProbeFields, trx?: Knex.Transaction): Promise<void> {
    const columns = Object.fromEntries(Object.entries(fields).map(([key, value]) => [PROBE_COLUMNS[key as keyof ReplicaProbeFields], value]));
    if (Object.keys(columns).length > 0) await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId }).update(columns);
  }

  async markDraining(instanceId: string, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId, draining: false }).update({ draining: true, draining_since: this.knex.fn.now() });
  }

  /** Scaling back up: a draining replica serves again. */
  async undrain(instanceId: string, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId, draining: true }).whereNull("destroying_at").update({ draining: false, draining_since: null });
  }

  /**
   * The controller's decision to destroy the replica, with the event that tells it once the
   * destroy is confirmed. With `neverReady`, only while it has never been ready (a probe may have
   * made it ready, and routed, since the round read it): false when it was, and nothing is written.
   */
  async markDestroying(instanceId: string, event: { kind: EventKind; detail: string }, options: { neverReady?: boolean } = {}, trx?: Knex.Transaction): Promise<boolean> {
    const query = (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId }).whereNull("destroying_at");
    if (options.neverReady) query.whereNull("ready_since");
    const marked = await query.update({ destroying_at: this.knex.fn.now(), destroy_event: event.kind, destroy_detail: event.detail });
    if (marked > 0 || options.neverReady !== true) return true;
    // Already being destroyed is no reason to drain it.
    return (await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId }).whereNotNull("destroying_at").first()) !== undefined;
  }

  /**
   * In the transaction that writes the replica's instance record: claims the row for it, or
   * throws ConflictError when the row was removed meanwhile (a new leader gave the launch up).
   */
  async claimRecord(instanceId: string, trx: Knex.Transaction): Promise<void> {
    const claimed = await trx(REPLICAS).where({ instance_id: instanceId }).whereNull("removed_at").update({ record_claimed_at: this.knex.fn.now() });
    if (claimed === 0) throw new ConflictError(`The replica '${instanceId}' was given up meanwhile; nothing is rented for it`);
  }

  /**
   * Gives up a launch whose record never came; false when its record is being written (claimed),
   * so that the row and the record stay together.
   */
  async removeUnclaimed(instanceId: string, trx?: Knex.Transaction): Promise<boolean> {
    const removed = await (trx ?? this.knex)(REPLICAS)
      .where({ instance_id: instanceId })
      .whereNull("removed_at")
      .whereNull("record_claimed_at")
      .update({ removed_at: this.knex.fn.now() });
    return removed > 0;
  }

  async condemn(instanceId: string, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId }).whereNull("condemned_at").update({ condemned_at: this.knex.fn.now() });
  }

  /** The replica is gone from the endpoint; its row stays for the endpoint's total cost. False: it was gone already. */
  async remove(instanceId: string, trx?: Knex.Transaction): Promise<boolean> {
    const removed = await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId }).whereNull("removed_at").update({ removed_at: this.knex.fn.now() });
    return removed > 0;
  }

  /** Forgets a launch that wrote no record (nothing was rented): no row is kept for it. */
  async forget(instanceId: string, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.knex)(REPLICAS).where({ instance_id: instanceId }).delete();
  }
}
