import type { ServiceImpl } from "@connectrpc/connect";
import type { GpuService } from "../../../../gen/gpu/v1/gpu_service_pb.js";
import { excerpt, NotFoundError } from "../../../errors.js";
import type { GpuContext } from "../../gpu-context.js";
import { DEFAULT_LIMIT, validateLimit } from "../../marketplace/offers.js";
import type { EndpointEventStore } from "./endpoint-events.js";
import { checkPatch, patchOf } from "./endpoint-patch.js";
import { newEndpointOf } from "./endpoint-request.js";
import type { EndpointRecord, EndpointStore, TokenPrice } from "./endpoint-store.js";
import { capacityMarketsOf, capacitySummary, isDefaultCapacity } from "./endpoint-capacity.js";
import { autoscaleSummary, endpointMessage, eventMessage } from "./endpoint-view.js";
import { replicaFactsOf } from "../replicas/replica-facts.js";

// The endpoint RPCs. They write the resource and its events; the controller (on the sync
// leader) does the machines. Each operation's event names its actor.

type EndpointRpcs = Pick<
  ServiceImpl<typeof GpuService>,
  "createEndpoint" | "listEndpoints" | "getEndpoint" | "updateEndpoint" | "deleteEndpoint" | "listEndpointEvents"
>;

export interface EndpointServiceOptions {
  ctx: GpuContext;
  endpoints: EndpointStore;
  events: EndpointEventStore;
  /** Who is calling: the token's name, `anonymous` with auth off. */
  actorOf(context: Parameters<EndpointRpcs["getEndpoint"]>[1]): string;
}

export function createEndpointRpcs(options: EndpointServiceOptions): EndpointRpcs {
  const { ctx, endpoints, events, actorOf } = options;

  async function view(endpoint: EndpointRecord) {
    const replicas = await replicaFactsOf({ ctx, endpoints }, endpoint);
    return endpointMessage(endpoint, replicas, await endpoints.totalCost(endpoint.id));
  }

  async function requireEndpoint(name: string): Promise<EndpointRecord> {
    const endpoint = await endpoints.getByName(name);
    if (!endpoint) throw new NotFoundError(`Endpoint '${excerpt(name)}' not found`);
    return endpoint;
  }

  return {
    async createEndpoint(req, context) {
      const fresh = newEndpointOf({ ...req, customConfig: req.customConfig }, capacityMarketsOf(ctx.marketplace));
      const endpoint = await ctx.knex.transaction(async (trx) => {
        const created = await endpoints.insert(fresh, trx);
        await events.append(
          {
            endpointId: created.id,
            kind: "scaled",
            detail:
              `created with ${created.replicas} replica(s) of '${created.templateName}' within $${created.maxCostPerHour}/h` +
              (created.autoscale ? `, autoscale ${autoscaleSummary(created.autoscale)}` : "") +
              (isDefaultCapacity(created.capacity) ? "" : `, capacity ${capacitySummary(created.capacity)}`),
            actor: actorOf(context),
          },
          trx,
        );
        return created;
      });
      return view(endpoint);
    },
    async listEndpoints() {
      return { endpoints: await Promise.all((await endpoints.listLive()).map(view)) };
    },
    async getEndpoint({ name }) {
      return view(await requireEndpoint(name));
    },
    async updateEndpoint(req, context) {
      const change = patchOf(req, capacityMarketsOf(ctx.marketplace));
      const current = await requireEndpoint(req.name);
      if (current.phase !== "active") throw new NotFoundError(`Endpoint '${excerpt(req.name)}' is ${current.phase}`);
      checkPatch(change, current);
      const updated = await ctx.knex.transaction(async (trx) => {
        const changed = await endpoints.update(current.id, change, trx);
        if (!changed) return null;
        const detail = changeDetail(current, changed, { replicas: change.replicas !== undefined, budget: change.maxCostPerHour !== undefined, price: change.tokenPrice !== undefined });
        if (detail) await events.append({ endpointId: current.id, kind: "scaled", detail, actor: actorOf(context) }, trx);
        return changed;
      });
      if (!updated) throw new NotFoundError(`Endpoint '${excerpt(req.name)}' is being deleted`);
      return view(updated);
    },
    async deleteEndpoint({ name }, context) {
      const current = await requireEndpoint(name);
      if (current.phase !== "active") return view(current);
      const deleting = await ctx.knex.transaction(async (trx) => {
        const marked = await endpoints.markDeleting(current.id, trx);
        if (marked) {
          await events.append({ endpointId: current.id, kind: "deleted", detail: "deletion requested: its machines are destroyed", actor: actorOf(context) }, trx);
        }
        return marked;
      });
      return view(deleting ?? (await requireEndpoint(name)));
    },
    async listEndpointEvents({ name, limit }) {
      validateLimit(limit);
      const endpoint = await requireEndpoint(name);
      return { events: (await events.list(endpoint.id, limit ?? DEFAULT_LIMIT)).map(eventMessage) };
    },
  };
}

/** What a PATCH changed, in the words of its `scaled` event; empty when it changed nothing. */
function changeDetail(before: EndpointRecord, after: EndpointRecord, given: { replicas: boolean; budget: boolean; price: boolean }): string {
  const parts: string[] = [];
  if (after.autoscale && !before.autoscale) parts.push(`autoscale on: ${autoscaleSummary(after.autoscale)}`);
  else if (after.autoscale && before.autoscale && autoscaleSummary(after.autoscale) !== autoscaleSummary(before.autoscale)) {
    parts.push(`autoscale changed: ${autoscaleSummary(after.autoscale)}`);
  } else if (!after.autoscale && before.autoscale) parts.push(`autoscale off: fixed at ${after.replicas} replica(s)`);
  if (capacitySummary(after.capacity) !== capacitySummary(before.capacity)) parts.push(`capacity: ${capacitySummary(after.capacity)}`);
  if (given.replicas || after.replicas !== before.replicas) parts.push(`replicas ${before.replicas} -> ${after.replicas}`);
  if (given.budget) parts.push(`max_cost_per_hour $${before.maxCostPerHour}/h -> $${after.maxCostPerHour}/h`);
  if (given.price) parts.push(`token_price ${priceSummary(before.tokenPrice)} -> ${priceSummary(after.tokenPrice)}`);
  if (after.routing !== before.routing) parts.push(`routing ${before.routing} -> ${after.routing}`);
  return parts.join(", ");
}

function priceSummary(price: TokenPrice | null | undefined): string {
  return price ? `$${price.inputPerMtok}/$${price.outputPerMtok} per million input/output tokens` : "none";
}
