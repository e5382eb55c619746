import type { Knex } from "knex";

// The execution log (table "GpuExecutionLog"): one record per creation, destroy and status
// change. Reads never write here.

const TABLE = "GpuExecutionLog";

export type LogOperation =
  | "create_instance"
  | "destroy_instance"
  | "status_change"
  | "auto_destroy"
  | "reconcile_destroy";

export type LogMetadata = Record<string, string | number | boolean | null | Record<string, unknown>>;

export interface NewLogEntry {
  /** Null for an operation refused before any record existed (a create over the fleet cap). */
  instanceId: string | null;
  operation: LogOperation;
  command: string;
  result: string;
  /** Milliseconds the operation took. */
  executionTime: number;
  success: boolean;
  metadata: LogMetadata;
  /** Who acted: a token's name, or anonymous, cron, system (src/actor.ts); unknown on rows older than actors. */
  actor: string;
}

export interface LogEntry extends NewLogEntry {
  instanceId: string;
  id: bigint;
  createdAt: Date;
}

interface Row {
  id: string;
  instance_id: string;
  operation: LogOperation;
  command: string;
  result: string;
  execution_time: number;
  success: boolean;
  metadata: LogMetadata;
  actor: string;
  created_at: Date;
}

export class ExecutionLogStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): ExecutionLogStore {
    return new ExecutionLogStore(knex);
  }

  async append(entry: NewLogEntry, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.knex)(TABLE).insert({
      instance_id: entry.instanceId,
      operation: entry.operation,
      command: entry.command,
      result: entry.result,
      execution_time: Math.max(0, Math.round(entry.executionTime)),
      success: entry.success,
      metadata: JSON.stringify(entry.metadata),
      actor: entry.actor,
    });
  }

  /** The newest `limit` records of one instance, newest first. */
  async listForInstance(instanceId: string, limit: number): Promise<LogEntry[]> {
    const rows = (await this.knex<Row>(TABLE)
      .where({ instance_id: instanceId })
      .orderBy("id", "desc")
      .limit(limit)) as Row[];
    return rows.map((row) => ({
      id: BigInt(row.id),
      instanceId: row.instance_id,
      operation: row.operation,
      command: row.command,
      result: row.result,
      executionTime: row.execution_time,
      success: row.success,
      metadata: row.metadata,
      actor: row.actor,
      createdAt: row.created_at,
    }));
  }
}
