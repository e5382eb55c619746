import type { Knex } from "knex";
import { instanceRef } from "../marketplace/markets/market-ids.js";
import { SORT_SQL } from "./instance-list-sql.js";
import type { InstanceSortKey } from "./page-token.js";
import type { StoredStatus } from "./status.js";

// The stored instance records (table gpu_instances). Rows map to InstanceRecord here and nowhere
// else. Write methods take an optional transaction: the caller owns the boundary.

const TABLE = "gpu_instances";
export const INSTANCE_ID_PREFIX = "gpu-";

export interface GpuInfo {
  gpuName: string;
  numGpus: number;
  gpuRam: number;
}

export interface InstanceRecord {
  instanceId: string;
  /** The market's own id of its machine (never prefixed with the market); null until the market answered the creation. */
  marketInstanceId: string | null;
  /** The label its marketplace instance carries: deployment id and instance_id (deployment.ts). */
  marketLabel: string;
  offerId: string;
  imageName: string;
  status: StoredStatus;
  gpuInfo: GpuInfo;
  costPerHour: number;
  publicIp: string | null;
  sshPort: number | null;
  portMappings: Record<string, number>;
  templateName: string | null;
  createdAt: Date;
  updatedAt: Date;
  destroyedAt: Date | null;
  destroyRequestedAt: Date | null;
  startCommand: string;
  autoDestroy: boolean;
  /** Limits after which the sync loop destroys the instance; null: none. */
  maxHours: number | null;
  maxCost: number | null;
  /**
   * The key its model server demands (vLLM --api-key, sent as a bearer token); null for an
   * instance without a model server or created before keys. A secret: never logged, never in a
   * list, status or log answer (only GetModelKey and the creation answer carry it).
   */
  modelApiKey: string | null;
  /** The endpoint this instance is a replica of; null for an instance created on its own. */
  endpoint: string | null;
  /** The most it may be rented at, $/h (the template's max_price, or less for a replica); null: no cap. */
  priceCap: number | null;
  /** Rented as an interruptible bid: the marketplace may preempt it. */
  interruptible: boolean;
  /** The bid, $/h for the machine, storage excluded (costPerHour is what is billed: the bid plus storage); null: on-demand. */
  bidPerHour: number | null;
  /** When the marketplace last preempted it (stored status `exited`); null while it is not preempted. */
  preemptedAt: Date | null;
  /** The physical machine it was rented on, where the marketplace says (vast.ai machine_id); for spreading replicas. */
  machineId: string | null;
  /**
   * The market it is rented on (MARKETPLACE's name): every call about its machine goes there.
   * Null for a record from before several markets until a start or a listing fills it in
   * (docs/marketplaces.md), and for records of a bare adapter (tests).
   */
  market: string | null;
}

export type NewInstance = Pick<
  InstanceRecord,
  | "instanceId"
  | "marketLabel"
  | "offerId"
  | "imageName"
  | "gpuInfo"
  | "costPerHour"
  | "templateName"
  | "startCommand"
  | "autoDestroy"
  | "maxHours"
  | "maxCost"
  | "modelApiKey"
> &
  Partial<Pick<InstanceRecord, "endpoint" | "priceCap" | "bidPerHour" | "machineId" | "market">>;

/** The offer a creating record is about to rent, and the bid on it (null: on-demand). */
export type OfferFacts = Pick<InstanceRecord, "offerId" | "gpuInfo" | "costPerHour"> & {
  bidPerHour?: number | null;
  machineId?: string | null;
  market?: string | null;
};

/** What the marketplace says about a running machine, copied into the record. */
export interface MarketFacts {
  /** The market's own id. */
  marketInstanceId: string;
  /** The market that answered; fills in a record that had none. */
  market?: string;
  gpuInfo: GpuInfo;
  costPerHour: number;
  publicIp: string | null;
  sshPort: number | null;
  portMappings: Record<string, number>;
}

/** The id the marketplace port takes for the record's machine: `<market>:<own id>`, or the own id of a record naming no market. */
export function machineRefOf(record: Pick<InstanceRecord, "market" | "marketInstanceId">): string | null {
  if (record.marketInstanceId === null) return null;
  return record.market ? instanceRef(record.market, record.marketInstanceId) : record.marketInstanceId;
}

export type NetworkFacts = Pick<MarketFacts, "publicIp" | "sshPort" | "portMappings">;

interface Row {
  instance_id: string;
  market_instance_id: string | null;
  /** Null for records from before deployment-scoped labels: their label is the instance_id. */
  market_label: string | null;
  offer_id: string;
  image_name: string;
  status: StoredStatus;
  gpu_info: Partial<{ gpu_name: string; num_gpus: number; gpu_ram: number }>;
  cost_per_hour: number;
  public_ip: string | null;
  ssh_port: number | null;
  port_mappings: Record<string, number>;
  template_name: string | null;
  created_at: Date;
  updated_at: Date;
  destroyed_at: Date | null;
  destroy_requested_at: Date | null;
  start_command: string;
  auto_destroy: boolean;
  max_hours: number | null;
  max_cost: number | null;
  model_api_key: string | null;
  endpoint: string | null;
  price_cap: number | null;
  interruptible?: boolean;
  bid_per_hour?: number | null;
  machine_id?: string | null;
  preempted_at?: Date | null;
  market?: string | null;
}

export function gpuInfoJson(info: GpuInfo) {
  return { gpu_name: info.gpuName, num_gpus: info.numGpus, gpu_ram: info.gpuRam };
}

export function toRecord(row: Row): InstanceRecord {
  return {
    instanceId: row.instance_id,
    marketInstanceId: row.market_instance_id,
    marketLabel: row.market_label ?? row.instance_id,
    offerId: row.offer_id,
    imageName: row.image_name,
    status: row.status,
    gpuInfo: {
      gpuName: row.gpu_info.gpu_name ?? "",
      numGpus: row.gpu_info.num_gpus ?? 0,
      gpuRam: row.gpu_info.gpu_ram ?? 0,
    },
    costPerHour: row.cost_per_hour,
    publicIp: row.public_ip,
    sshPort: row.ssh_port,
    portMappings: row.port_mappings ?? {},
    templateName: row.template_name,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    destroyedAt: row.destroyed_at,
    destroyRequestedAt: row.destroy_requested_at,
    startCommand: row.start_command,
    autoDestroy: row.auto_destroy,
    maxHours: row.max_hours,
    maxCost: row.max_cost,
    modelApiKey: row.model_api_key ?? null,
    endpoint: row.endpoint ?? null,
    priceCap: row.price_cap ?? null,
    interruptible: row.interruptible ?? false,
    bidPerHour: row.bid_per_hour ?? null,
    preemptedAt: row.preempted_at ?? null,
    machineId: row.machine_id ?? null,
    market: row.market ?? null,
  };
}

/** A bid (interruptible) or, with none, an on-demand rental. */
function bidColumns(bidPerHour: number | null | undefined) {
  return { interruptible: bidPerHour != null, bid_per_hour: bidPerHour ?? null };
}

function networkColumns(facts: NetworkFacts) {
  return {
    public_ip: facts.publicIp,
    ssh_port: facts.sshPort,
    port_mappings: JSON.stringify(facts.portMappings),
  };
}

/** Same text as the partial index gpu_instances_live_idx, so the planner uses it. */
export const LIVE_PREDICATE =
  "status not in ('destroyed', 'failed') or (destroy_requested_at is not null and status <> 'destroyed')";

export interface ListPageQuery {
  statusFilter?: StoredStatus;
  sortBy: InstanceSortKey;
  limit: number;
  /** ISO instant uptimes are measured at. */
  asOf: string;
  /** Sort value and instance_id of the last item of the previous page. */
  after?: readonly [string, string];
}

export interface ListPage {
  records: InstanceRecord[];
  /** Sort value and id of the last record, when more records follow. */
  nextAfter: [string, string] | undefined;
}

export class InstanceStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): InstanceStore {
    return new InstanceStore(knex);
  }

  /** A fresh id such as gpu-1042; ids are never reused. */
  async nextInstanceId(): Promise<string> {
    const { rows } = await this.knex.raw<{ rows: Array<{ n: string }> }>("select nextval('gpu_instance_id_seq') as n");
    return `${INSTANCE_ID_PREFIX}${rows[0]!.n}`;
  }

  /** Writes a record in status creating, before the marketplace is asked for the machine. */
  async insertCreating(record: NewInstance, trx?: Knex.Transaction): Promise<InstanceRecord> {
    const [row] = await (trx ?? this.knex)(TABLE)
      .insert({
        instance_id: record.instanceId,
        market_label: record.marketLabel,
        offer_id: record.offerId,
        image_name: record.imageName,
        status: "creating",
        gpu_info: JSON.stringify(gpuInfoJson(record.gpuInfo)),
        cost_per_hour: record.costPerHour,
        template_name: record.templateName,
        start_command: record.startCommand,
        auto_destroy: record.autoDestroy,
        max_hours: record.maxHours,
        max_cost: record.maxCost,
        model_api_key: record.modelApiKey,
        endpoint: record.endpoint ?? null,
        price_cap: record.priceCap ?? null,
        ...bidColumns(record.bidPerHour),
        machine_id: record.machineId ?? null,
        market: record.market ?? null,
      })
      .returning("*");
    return toRecord(row as Row);
  }

  /** Points a creating record that has rented nothing yet at another offer (the first was taken). */
  async retarget(instanceId: string, offer: OfferFacts, startCommand: string, trx?: Knex.Transaction): Promise<InstanceRecord | null> {
    const [row] = await (trx ?? this.knex)(TABLE)
      .where({ instance_id: instanceId, status: "creating" })
      .whereNull("market_instance_id")
      .update({
        offer_id: offer.offerId,
        gpu_info: JSON.stringify(gpuInfoJson(offer.gpuInfo)),
        cost_per_hour: offer.costPerHour,
        ...bidColumns(offer.bidPerHour),
        machine_id: offer.machineId ?? null,
        market: offer.market ?? null,
        start_command: startCommand,
        updated_at: this.knex.fn.now(),
      })
      .returning("*");
    return row ? toRecord(row as Row) : null;
  }

  async get(instanceId: string): Promise<InstanceRecord | null> {
    const row = await this.knex(TABLE).where({ instance_id: instanceId }).first();
    return row ? toRecord(row as Row) : null;
  }

  /** The records of these ids that exist, in no particular order. */
  async getMany(instanceIds: readonly string[]): Promise<InstanceRecord[]> {
    if (instanceIds.length === 0) return [];
    const rows = await this.knex(TABLE).whereIn("instance_id", instanceIds as string[]);
    return (rows as Row[]).map(toRecord);
  }

  /**
   * Fills in what the marketplace answered, only while the record is still the creating one
   * without a marketplace id: a reconciler and a late creation cannot both complete it.
   */
  async completeCreation(instanceId: string, facts: MarketFacts, trx?: Knex.Transaction): Promise<InstanceRecord | null> {
    const [row] = await (trx ?? this.knex)(TABLE)
      .where({ instance_id: instanceId, status: "creating" })
      .whereNull("market_instance_id")
      .update({
        market_instance_id: facts.marketInstanceId,
        ...(facts.market !== undefined && { market: this.knex.raw("coalesce(market, ?)", [facts.market]) }),
        gpu_info: JSON.stringify(gpuInfoJson(facts.gpuInfo)),
        cost_per_hour: facts.costPerHour,
        ...networkColumns(facts),
        updated_at: this.knex.fn.now(),
      })
      .returning("*");
    return row ? toRecord(row as Row) : null;
  }

  /**
   * Moves a record from `from` to `to` (compare-and-set: a concurrent sync that already moved it
   * updates nothing and so writes no second log record). Returns the updated record or null.
   */
  async changeStatus(
    instanceId: string,
    from: StoredStatus,
    to: StoredStatus,
    network?: NetworkFacts,
    trx?: Knex.Transaction,
    preempted?: boolean,
  ): Promise<InstanceRecord | null> {
    const [row] = await (trx ?? this.knex)(TABLE)
      .where({ instance_id: instanceId, status: from })
      .update({
        status: to,
        updated_at: this.knex.fn.now(),
        ...(network ? networkColumns(network) : {}),
        // true: preempted now (the first moment seen is kept); false: it runs again; absent: unchanged.
        ...(preempted === undefined ? {} : { preempted_at: preempted ? this.knex.raw("coalesce(preempted_at, now())") : null }),
      })
      .returning("*");
    return row ? toRecord(row as Row) : null;
  }

  /**
   * Marks a creating (or loading) record failed; `from` widens that for a machine that failed once
   * up. Its cost ends now when a marketplace machine was rented for it, and at created_at (no cost)
   * when none was: destroyed_at is where every cost figure ends.
   */
  async markFailed(
    instanceId: string,
    machineRented: boolean,
    trx?: Knex.Transaction,
    // A container can fail to start after its image loaded, so loading records fail too.
    from: readonly StoredStatus[] = ["creating", "loading"],
  ): Promise<InstanceRecord | null> {
    const [row] = await (trx ?? this.knex)(TABLE)
      .where({ instance_id: instanceId })
      .whereIn("status", from as StoredStatus[])
      .update({
        status: "failed",
        destroyed_at: machineRented ? this.knex.fn.now() : this.knex.ref("created_at"),
        updated_at: this.knex.fn.now(),
      })
      .returning("*");
    return row ? toRecord(row as Row) : null;
  }

  /**
   * Marks a record destroyed once the marketplace confirmed it; null when it already was, so that
   * two concurrent destroys write one log record. A failed record keeps the end its cost had.
   */
  async markDestroyed(instanceId: string, trx?: Knex.Transaction): Promise<InstanceRecord | null> {
    const [row] = await (trx ?? this.knex)(TABLE)
      .where({ instance_id: instanceId })
      .whereNot({ status: "destroyed" })
      .update({
        status: "destroyed",
        destroyed_at: this.knex.raw("coalesce(destroyed_at, now())"),
        updated_at: this.knex.fn.now(),
      })
      .returning("*");
    return row ? toRecord(row as Row) : null;
  }

  /** Notes that a destroy was asked for, so that the sync loop retries it until confirmed. */
  async requestDestroy(instanceId: string): Promise<void> {
    await this.knex(TABLE)
      .where({ instance_id: instanceId })
      .whereNull("destroy_requested_at")
      .update({ destroy_requested_at: this.knex.fn.now() });
  }

  /**
   * Gives the live records that name no market (written before several markets) the one market
   * configured now; returns how many. Finished records keep theirs empty: no call goes to them.
   */
  async fillMarketOfLive(market: string): Promise<number> {
    return this.knex(TABLE).whereNull("market").whereRaw(`(${LIVE_PREDICATE})`).update({ market });
  }

  /** Names the market of a record that named none, once a market listed its machine under its id. */
  async claimMarket(instanceId: string, market: string): Promise<InstanceRecord | null> {
    const [row] = await this.knex(TABLE).where({ instance_id: instanceId }).whereNull("market").update({ market }).returning("*");
    return row ? toRecord(row as Row) : null;
  }

  /** Records the sync loop and the reconciler look at: not finished, or with a pending destroy. */
  async listLive(): Promise<InstanceRecord[]> {
    const rows = await this.knex(TABLE).whereRaw(LIVE_PREDICATE).orderBy("instance_id");
    return (rows as Row[]).map(toRecord);
  }

  /** Records by the label of their marketplace instance, for matching marketplace instances. */
  async getByLabels(labels: readonly string[]): Promise<InstanceRecord[]> {
    if (labels.length === 0) return [];
    const rows = await this.knex(TABLE).whereRaw("coalesce(market_label, instance_id) = any(?)", [labels as string[]]);
    return (rows as Row[]).map(toRecord);
  }

  /** One page in (sort value, instance_id) descending order, continuing after `after`. */
  async listPage(query: ListPageQuery): Promise<ListPage> {
    const sort = SORT_SQL[query.sortBy];
    const asOf = sort.usesAsOf ? [query.asOf] : [];
    const q = this.knex(TABLE).select("*", this.knex.raw(`${sort.key} as sort_key`, asOf));
    if (query.statusFilter) q.where("status", query.statusFilter);
    if (query.after) {
      q.whereRaw(`(${sort.order}, instance_id) < (?::${sort.cast}, ?)`, [...asOf, ...query.after]);
    }
    const rows = (await q
      .orderByRaw(`${sort.order} desc, instance_id desc`, asOf)
      .limit(query.limit + 1)) as Array<Row & { sort_key: string }>;
    const page = rows.slice(0, query.limit);
    const last = page.at(-1);
    return {
      records: page.map(toRecord),
      nextAfter: rows.length > query.limit && last ? [last.sort_key, last.instance_id] : undefined,
    };
  }

  /** Records with that status, or all; read from the trigger-maintained summary, not by counting rows. */
  async count(statusFilter?: StoredStatus): Promise<number> {
    const q = this.knex("gpu_instance_stats").sum<Array<{ n: string | null }>>({ n: "n" });
    if (statusFilter) q.where("status", statusFilter);
    const [row] = await q;
    return Number(row?.n ?? 0);
  }
}
