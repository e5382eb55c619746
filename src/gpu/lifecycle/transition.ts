import type { Knex } from "knex";
import type { NewLogEntry } from "../store/execution-log-store.js";
import type { GpuContext } from "../gpu-context.js";
import type { InstanceRecord } from "../store/instance-store.js";

// Every change of a record's status goes through here: a compare-and-set write and its log
// record, in one transaction. The write matches only the state the caller saw, so of two
// concurrent writers (two syncs, a creation and the reconciler, two destroys) one changes the
// record and writes the log record, and the other changes nothing and writes nothing.

/** A compare-and-set write: the updated record, or null when the record was not in the expected state. */
export type CompareAndSet = (trx: Knex.Transaction) => Promise<InstanceRecord | null>;

/**
 * Applies `write` and, when it changed the record, appends the log record `logOf` makes of the
 * updated record, atomically. Returns the updated record, or null when nothing changed.
 */
export function transition(
  ctx: Pick<GpuContext, "knex" | "logs">,
  write: CompareAndSet,
  logOf: (updated: InstanceRecord) => NewLogEntry,
): Promise<InstanceRecord | null> {
  return ctx.knex.transaction(async (trx) => {
    const updated = await write(trx);
    if (updated) await ctx.logs.append(logOf(updated), trx);
    return updated;
  });
}
