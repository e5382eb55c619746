import type { Knex } from "knex";
import type { CreateMarketInstanceRequest } from "../port.js";

// Where the simulated marketplace keeps its instances when they must outlive the process: the
// table sim_market_instances of the service's database. The marketplace reads it before every
// call and writes every change through, so processes on one database see one marketplace.

/** What the simulation needs to rebuild an instance; times in epoch ms. */
export interface SimRecord {
  id: string;
  offerId: string;
  request: CreateMarketInstanceRequest;
  createdAt: number;
  runningAt: number;
  halted: SimHalt | undefined;
  serverWanted: boolean;
  /** Host port of the model server, kept so that it comes back on the same port. */
  hostPort: number | undefined;
  /** When a bid instance is preempted at random (drawn at its creation); undefined: never. */
  preemptAt: number | undefined;
}

/** Why an instance stopped: a control (exited, offline) or a preemption of a bid. */
export type SimHalt = "exited" | "offline" | "preempted";

export interface SimStore {
  nextId(): Promise<number>;
  load(): Promise<SimRecord[]>;
  /** False when another instance already rents the offer. */
  insert(record: SimRecord): Promise<boolean>;
  save(record: SimRecord): Promise<void>;
  remove(id: string): Promise<void>;
}

const TABLE = "sim_market_instances";

interface Row {
  id: string;
  offer_id: string;
  request: CreateMarketInstanceRequest;
  created_ms: string;
  running_ms: string;
  halted: SimHalt | null;
  server_wanted: boolean;
  host_port: number | null;
  preempt_ms: string | null;
}

export function createPgSimStore(knex: Knex): SimStore {
  const mutable = (r: SimRecord) => ({
    running_ms: r.runningAt,
    halted: r.halted ?? null,
    server_wanted: r.serverWanted,
    host_port: r.hostPort ?? null,
    preempt_ms: r.preemptAt ?? null,
  });
  return {
    async nextId() {
      const { rows } = await knex.raw<{ rows: Array<{ n: string }> }>("select nextval('sim_market_instance_id_seq') as n");
      return Number(rows[0]!.n);
    },
    async load() {
      const rows: Row[] = await knex(TABLE).orderBy("id");
      return rows.map((row) => ({
        id: row.id,
        offerId: row.offer_id,
        request: row.request,
        createdAt: Number(row.created_ms),
        runningAt: Number(row.running_ms),
        halted: row.halted ?? undefined,
        serverWanted: row.server_wanted,
        hostPort: row.host_port ?? undefined,
        preemptAt: row.preempt_ms === null ? undefined : Number(row.preempt_ms),
      }));
    },
    async insert(record) {
      const inserted = await knex(TABLE)
        .insert({ id: record.id, offer_id: record.offerId, request: JSON.stringify(record.request), created_ms: record.createdAt, ...mutable(record) })
        .onConflict("offer_id")
        .ignore()
        .returning("id");
      return inserted.length === 1;
    },
    async save(record) {
      await knex(TABLE).where({ id: record.id }).update(mutable(record));
    },
    async remove(id) {
      await knex(TABLE).where({ id }).delete();
    },
  };
}
