import { createHash } from "node:crypto";
import type { Knex } from "knex";
import { OperationFailedError } from "../errors.js";

// Which marketplace machines are this deployment's. Every machine GpuService rents carries the
// label `<deployment id>/<instance_id>`, and an endpoint's replica `<deployment id>/<instance_id>/<endpoint>`
// (so that the marketplace's console shows what a machine serves). The deployment id is unique to the service's database:
// derived from PostgreSQL's system identifier (unique per cluster, new in a restored copy) and
// the database name, so two deployments sharing one marketplace account never touch each other's
// machines, and a staging copy of production's database does not adopt production's machines.
// GPU_DEPLOYMENT_ID overrides it, e.g. where pg_control_system() is not readable.

export interface Deployment {
  readonly id: string;
  /** The label of the machine of this instance (of an endpoint's replica when `endpoint` is given). */
  labelOf(instanceId: string, endpoint?: string | null): string;
  /** The instance_id a label of this deployment names; undefined for anybody else's label. */
  instanceIdOf(label: string): string | undefined;
}

export function deploymentOf(id: string): Deployment {
  const prefix = `${id}/`;
  return {
    id,
    labelOf: (instanceId, endpoint) => `${prefix}${instanceId}${endpoint ? `/${endpoint}` : ""}`,
    instanceIdOf: (label) => {
      if (!label.startsWith(prefix)) return undefined;
      const instanceId = label.slice(prefix.length).split("/")[0];
      return instanceId ? instanceId : undefined;
    },
  };
}

/** The deployment of this database: the override when given, else derived from the database. */
export async function resolveDeployment(knex: Knex, override: string | undefined): Promise<Deployment> {
  if (override !== undefined) return deploymentOf(override);
  let identity: { system_identifier: string; database: string };
  try {
    const { rows } = await knex.raw<{ rows: Array<{ system_identifier: string; database: string }> }>(
      "select system_identifier::text as system_identifier, current_database() as database from pg_control_system()",
    );
    identity = rows[0]!;
  } catch (err) {
    throw new OperationFailedError(`Could not derive the deployment id from the database (${(err as Error).message}); set GPU_DEPLOYMENT_ID`, {
      cause: err,
    });
  }
  const { system_identifier, database } = identity;
  return deploymentOf(`d${createHash("sha256").update(`${system_identifier}/${database}`).digest("hex").slice(0, 12)}`);
}
