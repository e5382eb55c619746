import type { JsonObject } from "@bufbuild/protobuf";
import type { Knex } from "knex";
import { ConflictError } from "../../../errors.js";
import type { EndpointRouting } from "../../../module.js";
import { ReplicaStore } from "./replica-store.js";

// Endpoints (table gpu_endpoints), and their replicas through `replicas` (replica-store.ts). Rows
// map to the records below here and nowhere else. Write methods take an optional transaction.

const ENDPOINTS = "gpu_endpoints";
const REPLICAS = "gpu_endpoint_replicas";

/** The stored part of an endpoint's state; starting, ready, degraded, parked and idle are computed. */
export type EndpointPhase = "active" | "deleting" | "deleted";

/** How an endpoint follows its load (SPEC.md section 2, "autoscaling"); every setting filled in. */
export interface AutoscaleSettings {
  minReplicas: number;
  maxReplicas: number;
  /** Requests in flight per replica it aims at. */
  targetInFlight: number;
  /** Seconds more replicas must be wanted before the target rises. */
  scaleUpAfterS: number;
  /** Seconds fewer replicas must be wanted before the target falls. */
  scaleDownAfterS: number;
}

/**
 * Which machines an endpoint's replicas are rented on (SPEC.md section 2, "Interruptible
 * replicas"); every setting filled in, the defaults when never set (every replica on-demand).
 */
export interface CapacitySettings {
  /** Rent replicas as interruptible bids where the marketplace has them. */
  interruptible: boolean;
  /** How many of the replicas are always on-demand (only counts with interruptible). */
  onDemandBase: number;
  /** With no interruptible offer that fits, rent an on-demand replica in its place. */
  fallback: boolean;
  /** The bid over the offer's minimum bid, as a share: bid = min_bid x (1 + bidMargin). */
  bidMargin: number;
  /** The markets (MARKETPLACE's names) its replicas may be rented on; empty: every configured one. */
  markets: readonly string[];
  /** Spread the replicas over the markets whose fitting offers are within 25% of the cheapest (slot-offers.ts). */
  spreadMarkets: boolean;
}

/** An operator's chargeback price of an endpoint's tokens, dollars per million tokens. */
export interface TokenPrice {
  inputPerMtok: number;
  outputPerMtok: number;
}

export interface EndpointRecord {
  id: string;
  name: string;
  templateName: string;
  /** The count the controller keeps: the caller's, or with autoscale the autoscaler's target. */
  replicas: number;
  maxCostPerHour: number;
  customConfig: JsonObject;
  /** The autoscaler's settings; null: a fixed count (`replicas` set by the caller). */
  autoscale: AutoscaleSettings | null;
  /** What the autoscaler remembers of the load between rounds. */
  autoscaleMemory: AutoscaleMemory;
  capacity: CapacitySettings;
  /** Absent or null: unpriced (keys with a budget may not call it). */
  tokenPrice?: TokenPrice | null;
  /** How its requests choose among its ready replicas. */
  routing: EndpointRouting;
  phase: EndpointPhase;
  /** Whether any replica has ever been ready (starting vs degraded). */
  everReady: boolean;
  /** Whether its budget holds a replica back right now. */
  budgetHeld: boolean;
  /** Launch failures in a row, for the backoff; reset when a replica becomes ready. */
  launchFailures: number;
  /** No launch before this instant (backoff); null: now. */
  nextLaunchAt: Date | null;
  /**
   * Launches that move the mix of machines (capacity-mix.ts) that failed in a row: their own
   * backoff; reset by a PATCH of the capacity and once nothing is left to move.
   */
  mixFailures: number;
  /** No such launch before this instant; null: now. */
  nextMixAt: Date | null;
  /** Since when the moves wait for a bid cheap enough (looked at again every GPU_ENDPOINT_MIX_RECHECK_MS); null: not waiting. */
  mixWaitSince: Date | null;
  createdAt: Date;
  deletedAt: Date | null;
}

/** What the autoscaler remembers between rounds: the way wanted has stood from the target, since when, and its bound. */
export interface AutoscaleMemory {
  direction: "up" | "down" | null;
  since: Date | null;
  /** Up: the least wanted since `since`; down: the most. */
  bound: number | null;
}

export type NewEndpoint = Pick<EndpointRecord, "name" | "templateName" | "replicas" | "maxCostPerHour" | "customConfig" | "autoscale" | "capacity" | "tokenPrice"> & {
  /** Absent: `prefix`, the default. */
  routing?: EndpointRouting;
};

/** A PATCH: undefined leaves a field as it is; autoscale null turns autoscaling off; capacity replaces the settings whole. */
export interface EndpointChange {
  replicas?: number;
  maxCostPerHour?: number;
  autoscale?: AutoscaleSettings | null;
  capacity?: CapacitySettings;
  /** null clears the price. */
  tokenPrice?: TokenPrice | null;
  routing?: EndpointRouting;
}

/** What kind of machine a replica is rented as; an on-demand replica is neither. */
interface EndpointRow {
  id: string;
  name: string;
  template_name: string;
  replicas: number;
  max_cost_per_hour: number;
  custom_config: JsonObject;
  autoscale_min_replicas: number | null;
  autoscale_max_replicas: number | null;
  autoscale_target_in_flight: number | null;
  autoscale_scale_up_after_s: number | null;
  autoscale_scale_down_after_s: number | null;
  scale_direction: "up" | "down" | null;
  scale_since: Date | null;
  scale_bound: number | null;
  capacity_interruptible: boolean;
  capacity_on_demand_base: number;
  capacity_fallback: boolean;
  capacity_bid_margin: number;
  capacity_markets: string[] | null;
  capacity_spread_markets: boolean | null;
  token_input_per_mtok: number | null;
  token_output_per_mtok: number | null;
  routing: EndpointRouting;
  phase: EndpointPhase;
  ever_ready: boolean;
  budget_held: boolean;
  launch_failures: number;
  next_launch_at: Date | null;
  mix_failures: number;
  next_mix_at: Date | null;
  mix_wait_since: Date | null;
  created_at: Date;
  deleted_at: Date | null;
}

function toEndpoint(row: EndpointRow): EndpointRecord {
  return {
    id: String(row.id),
    name: row.name,
    templateName: row.template_name,
    replicas: row.replicas,
    maxCostPerHour: row.max_cost_per_hour,
    customConfig: row.custom_config ?? {},
    autoscale: toAutoscale(row),
    autoscaleMemory: { direction: row.scale_direction ?? null, since: row.scale_since ?? null, bound: row.scale_bound ?? null },
    capacity: {
      interruptible: row.capacity_interruptible,
      onDemandBase: row.capacity_on_demand_base,
      fallback: row.capacity_fallback,
      bidMargin: row.capacity_bid_margin,
      markets: row.capacity_markets ?? [],
      spreadMarkets: row.capacity_spread_markets ?? false,
    },
    tokenPrice: row.token_input_per_mtok === null ? null : { inputPerMtok: row.token_input_per_mtok, outputPerMtok: row.token_output_per_mtok! },
    routing: row.routing,
    phase: row.phase,
    everReady: row.ever_ready,
    budgetHeld: row.budget_held,
    launchFailures: row.launch_failures,
    nextLaunchAt: row.next_launch_at,
    mixFailures: row.mix_failures,
    nextMixAt: row.next_mix_at,
    mixWaitSince: row.mix_wait_since,
    createdAt: row.created_at,
    deletedAt: row.deleted_at,
  };
}

// The migration's check keeps the five columns all set or all null.
function toAutoscale(row: EndpointRow): AutoscaleSettings | null {
  if (row.autoscale_min_replicas === null) return null;
  return {
    minReplicas: row.autoscale_min_replicas,
    maxReplicas: row.autoscale_max_replicas!,
    targetInFlight: row.autoscale_target_in_flight!,
    scaleUpAfterS: row.autoscale_scale_up_after_s!,
    scaleDownAfterS: row.autoscale_scale_down_after_s!,
  };
}

function autoscaleColumns(settings: AutoscaleSettings | null) {
  return {
    autoscale_min_replicas: settings?.minReplicas ?? null,
    autoscale_max_replicas: settings?.maxReplicas ?? null,
    autoscale_target_in_flight: settings?.targetInFlight ?? null,
    autoscale_scale_up_after_s: settings?.scaleUpAfterS ?? null,
    autoscale_scale_down_after_s: settings?.scaleDownAfterS ?? null,
  };
}

function capacityColumns(settings: CapacitySettings) {
  return {
    capacity_interruptible: settings.interruptible,
    capacity_on_demand_base: settings.onDemandBase,
    capacity_fallback: settings.fallback,
    capacity_bid_margin: settings.bidMargin,
    capacity_markets: settings.markets,
    capacity_spread_markets: settings.spreadMarkets,
  };
}

// The migration's check keeps both columns set or both null.
function tokenPriceColumns(price: TokenPrice | null | undefined) {
  return { token_input_per_mtok: price?.inputPerMtok ?? null, token_output_per_mtok: price?.outputPerMtok ?? null };
}

/** PostgreSQL's unique_violation: a second endpoint with a name in use. */
const UNIQUE_VIOLATION = "23505";

export class EndpointStore {
  /** The endpoints' replicas. */
  readonly replicas: ReplicaStore;

  private constructor(private readonly knex: Knex) {
    this.replicas = new ReplicaStore(knex);
  }

  static create({ knex }: { knex: Knex }): EndpointStore {
    return new EndpointStore(knex);
  }

  /** Inserts an endpoint; ConflictError (409) when an endpoint not deleted has its name. */
  async insert(endpoint: NewEndpoint, trx?: Knex.Transaction): Promise<EndpointRecord> {
    try {
      const [row] = await (trx ?? this.knex)(ENDPOINTS)
        .insert({
          name: endpoint.name,
          template_name: endpoint.templateName,
          replicas: endpoint.replicas,
          max_cost_per_hour: endpoint.maxCostPerHour,
          custom_config: JSON.stringify(endpoint.customConfig),
          ...autoscaleColumns(endpoint.autoscale),
          ...capacityColumns(endpoint.capacity),
          ...tokenPriceColumns(endpoint.tokenPrice),
          routing: endpoint.routing ?? "prefix",
        })
        .returning("*");
      return toEndpoint(row as EndpointRow);
    } catch (err) {
      if ((err as { code?: string }).code === UNIQUE_VIOLATION) {
        throw new ConflictError(`Endpoint '${endpoint.name}' already exists`, { extra: { field: "name" } });
      }
      throw err;
    }
  }

  /** The endpoint of that name not deleted, else the latest deleted one; null when there never was one. */
  async getByName(name: string): Promise<EndpointRecord | null> {
    const row = await this.knex(ENDPOINTS)
      .where({ name })
      .orderByRaw("(phase = 'deleted'), created_at desc, id desc")
      .first();
    return row ? toEndpoint(row as EndpointRow) : null;
  }

  async get(id: string): Promise<EndpointRecord | null> {
    const row = await this.knex(ENDPOINTS).where({ id }).first();
    return row ? toEndpoint(row as EndpointRow) : null;
  }

  /** Endpoints not deleted, oldest first: what the list shows and the controller keeps. */
  async listLive(): Promise<EndpointRecord[]> {
    const rows = await this.knex(ENDPOINTS).whereNot({ phase: "deleted" }).orderBy([{ column: "created_at" }, { column: "id" }]);
    return (rows as EndpointRow[]).map(toEndpoint);
  }

  /**
   * A PATCH: replicas, the budget, autoscaling on (the target kept within its new [min, max],
   * in the same statement so that a target the controller moved meanwhile is the one clamped),
   * changed, or off (the target stays as the fixed count), the capacity settings. It opens the
   * launch gates at once, as a caller who changes an endpoint expects to see it act; new capacity
   * settings also start the moves' backoff and wait over.
   */
  async update(id: string, change: EndpointChange, trx?: Knex.Transaction): Promise<EndpointRecord | null> {
    const { autoscale } = change;
    const [row] = await (trx ?? this.knex)(ENDPOINTS)
      .where({ id, phase: "active" })
      .update({
        ...(change.replicas !== undefined ? { replicas: change.replicas } : {}),
        ...(change.maxCostPerHour !== undefined ? { max_cost_per_hour: change.maxCostPerHour } : {}),
        // New settings: the autoscaler's memory of the load starts over.
        ...(autoscale !== undefined ? { ...autoscaleColumns(autoscale), scale_direction: null, scale_since: null, scale_bound: null } : {}),
        ...(autoscale ? { replicas: this.knex.raw("least(greatest(replicas, ?), ?)", [autoscale.minReplicas, autoscale.maxReplicas]) } : {}),
        ...(change.capacity !== undefined ? { ...capacityColumns(change.capacity), mix_failures: 0, mix_wait_since: null } : {}),
        ...(change.tokenPrice !== undefined ? tokenPriceColumns(change.tokenPrice) : {}),
        ...(change.routing !== undefined ? { routing: change.routing } : {}),
        next_launch_at: null,
        next_mix_at: null,
        updated_at: this.knex.fn.now(),
      })
      .returning("*");
    return row ? toEndpoint(row as EndpointRow) : null;
  }

  /**
   * The autoscaler moves the target of an active endpoint, from the target and with the settings
   * its round read; null when the endpoint changed meanwhile (a PATCH, a delete: the next round
   * decides on what it says now). A rise opens the launch gate at once (as a PATCH does); a fall
   * or no change keeps the backoff.
   */
  async setTarget(id: string, from: number, settings: AutoscaleSettings, replicas: number, trx?: Knex.Transaction): Promise<EndpointRecord | null> {
    const [row] = await (trx ?? this.knex)(ENDPOINTS)
      .where({ id, phase: "active", replicas: from, ...autoscaleColumns(settings) })
      .update({
        scale_direction: null,
        scale_since: null,
        scale_bound: null,
        replicas,
        // The right side reads the row as it was before this update.
        next_launch_at: this.knex.raw("case when ? > replicas then null else next_launch_at end", [replicas]),
        updated_at: this.knex.fn.now(),
      })
      .returning("*");
    return row ? toEndpoint(row as EndpointRow) : null;
  }

  /**
   * What the autoscaler remembers of the load until its next round, for the target and settings
   * its round read (`read`); false when a PATCH changed them meanwhile (its memory starts over).
   */
  async setAutoscaleMemory(id: string, read: Pick<EndpointRecord, "replicas" | "autoscale">, memory: AutoscaleMemory, trx?: Knex.Transaction): Promise<boolean> {
    const updated = await (trx ?? this.knex)(ENDPOINTS)
      .where({ id, phase: "active", replicas: read.replicas, ...autoscaleColumns(read.autoscale) })
      .update({ scale_direction: memory.direction, scale_since: memory.since, scale_bound: memory.bound });
    return updated > 0;
  }

  /** active -> deleting; null when it was not active (a concurrent delete got there first). */
  async markDeleting(id: string, trx?: Knex.Transaction): Promise<EndpointRecord | null> {
    const [row] = await (trx ?? this.knex)(ENDPOINTS)
      .where({ id, phase: "active" })
      .update({ phase: "deleting", updated_at: this.knex.fn.now() })
      .returning("*");
    return row ? toEndpoint(row as EndpointRow) : null;
  }

  /** deleting -> deleted; null when it already was. */
  async markDeleted(id: string, trx?: Knex.Transaction): Promise<EndpointRecord | null> {
    const [row] = await (trx ?? this.knex)(ENDPOINTS)
      .where({ id, phase: "deleting" })
      .update({ phase: "deleted", deleted_at: this.knex.fn.now(), updated_at: this.knex.fn.now() })
      .returning("*");
    return row ? toEndpoint(row as EndpointRow) : null;
  }

  /** The controller's bookkeeping on the endpoint: readiness seen, budget held, the launch backoffs. */
  async setControl(
    id: string,
    fields: Partial<Pick<EndpointRecord, "everReady" | "budgetHeld" | "launchFailures" | "nextLaunchAt" | "mixFailures" | "nextMixAt" | "mixWaitSince">>,
    trx?: Knex.Transaction,
  ): Promise<void> {
    const columns = {
      ...(fields.everReady !== undefined ? { ever_ready: fields.everReady } : {}),
      ...(fields.budgetHeld !== undefined ? { budget_held: fields.budgetHeld } : {}),
      ...(fields.launchFailures !== undefined ? { launch_failures: fields.launchFailures } : {}),
      ...(fields.nextLaunchAt !== undefined ? { next_launch_at: fields.nextLaunchAt } : {}),
      ...(fields.mixFailures !== undefined ? { mix_failures: fields.mixFailures } : {}),
      ...(fields.nextMixAt !== undefined ? { next_mix_at: fields.nextMixAt } : {}),
      ...(fields.mixWaitSince !== undefined ? { mix_wait_since: fields.mixWaitSince } : {}),
    };
    if (Object.keys(columns).length > 0) await (trx ?? this.knex)(ENDPOINTS).where({ id }).update(columns);
  }

  /**
   * The moves of the mix wait for a cheaper bid: the next look at `nextMixAt`. True when this
   * starts the wait (none was under way), in the same statement, so that one wait writes one
   * event whichever round or process looks.
   */
  async waitForBids(id: string, nextMixAt: Date, trx?: Knex.Transaction): Promise<boolean> {
    const { rows } = await (trx ?? this.knex).raw<{ rows: Array<{ started: boolean }> }>(
      `update ${ENDPOINTS} set next_mix_at = ?, mix_wait_since = coalesce(mix_wait_since, now()) where id = ? returning mix_wait_since = now() as started`,
      [nextMixAt, id],
    );
    return rows[0]?.started === true;
  }

  /** What every machine the endpoint ever had has cost, in dollars (a record's cost ends at destroyed_at). */
  async totalCost(endpointId: string): Promise<number> {
    const [row] = await this.knex(REPLICAS)
      .join("gpu_instances", "gpu_instances.instance_id", `${REPLICAS}.instance_id`)
      .where({ endpoint_id: endpointId })
      .select(
        this.knex.raw(
          "coalesce(sum(cost_per_hour * extract(epoch from (coalesce(destroyed_at, now()) - gpu_instances.created_at)) / 3600), 0) as total",
        ),
      );
    return Number((row as { total: string | number } | undefined)?.total ?? 0);
  }
}
