import type { Knex } from "knex";

// The events of endpoints (table gpu_endpoint_events, SPEC.md section 2, "Endpoints"): what the
// controller did and saw, and what callers changed, each with the actor that caused it.

const TABLE = "gpu_endpoint_events";

export const EVENT_KINDS = [
  "launched",
  "ready",
  "not_ready",
  "unhealthy",
  "replaced",
  "ended",
  "launch_failed",
  "budget_held",
  "scaled",
  "drained",
  "deleted",
  "woke",
  "idle",
  "preempted",
  "fallback",
] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

/** The actor of the controller's own events. */
export const SYSTEM_ACTOR = "system";

export interface NewEndpointEvent {
  endpointId: string;
  kind: EventKind;
  instanceId?: string | null;
  detail: string;
  actor?: string;
}

export interface EndpointEventRecord {
  at: Date;
  kind: EventKind;
  instanceId: string | null;
  detail: string;
  actor: string;
}

interface Row {
  at: Date;
  kind: EventKind;
  instance_id: string | null;
  detail: string;
  actor: string;
}

export class EndpointEventStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): EndpointEventStore {
    return new EndpointEventStore(knex);
  }

  async append(event: NewEndpointEvent, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.knex)(TABLE).insert({
      endpoint_id: event.endpointId,
      kind: event.kind,
      instance_id: event.instanceId ?? null,
      detail: event.detail,
      actor: event.actor ?? SYSTEM_ACTOR,
    });
  }

  /** Newest first (by id: the order they were written in, even within one millisecond). */
  async list(endpointId: string, limit: number): Promise<EndpointEventRecord[]> {
    const rows = (await this.knex(TABLE).where({ endpoint_id: endpointId }).orderBy("id", "desc").limit(limit)) as Row[];
    return rows.map((r) => ({ at: r.at, kind: r.kind, instanceId: r.instance_id, detail: r.detail, actor: r.actor }));
  }
}
