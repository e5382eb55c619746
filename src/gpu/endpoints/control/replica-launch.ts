import type { Knex } from "knex";
import { ACTOR_SYSTEM } from "../../../actor.js";
import { messageOf, NotFoundError, UnavailableError } from "../../../errors.js";
import type { EndpointConfig } from "../../../config.js";
import type { Candidate } from "../../creation/bid-choice.js";
import { anyOfferFits, chooseInterruptible, createInstance, type CreationRequest } from "../../creation/creation.js";
import { nothingToRentText } from "../../creation/slot-offers.js";
import { findTemplate } from "../../creation/templates.js";
import type { GpuContext } from "../../gpu-context.js";
import { directoryOf } from "../../marketplace/markets/market-directory.js";
import { roundMoney } from "../../money/cost.js";
import type { EndpointEventStore } from "../resource/endpoint-events.js";
import type { LaunchKind } from "./capacity-mix.js";
import type { MarketBackoff } from "./market-backoff.js";
import type { EndpointRecord, EndpointStore } from "../resource/endpoint-store.js";

// One replica's launch (SPEC.md section 2, "Endpoints", Money, and "Control loops survive their
// database"): the replica row first (the intent), then the creation, fenced twice: its record is
// written only while the row stands (a new leader may have given the launch up), and the
// marketplace is asked only while this process still leads. Launches that fail, and launches
// the budget holds back, back off alike, so that neither loops on the marketplace's offer search.
// A launch that moves the mix of machines (`replaces`: a fallback's way back to a bid, a PATCH of
// the capacity) backs off on its own: it never delays the launch of a missing replica, and the
// budget holding it back is no `budget_held` (the endpoint is at full strength). A move to a bid
// looks at the market before it writes anything: no bid cheap enough is an observation, not a
// failure (SPEC.md, "Back from fallback"): nothing rented, no row, no instance id, one event when
// the wait starts, and a look again GPU_ENDPOINT_MIX_RECHECK_MS (at most a minute) later.
// Over several markets (SPEC.md, "Several marketplaces", Endpoints) a creation that failed in one
// market (every candidate there refused, the market failing or blocked) is tried again at once in
// the endpoint's other markets, in the same round; the launch backoff is raised only when the
// last of them failed too (or when the failure names no market: nothing fits anywhere). The
// market that failed is left out of the endpoint's next launches for a while (market-backoff.ts).
// A creation whose outcome that market left unknown goes on elsewhere too; its replica is given up.

/** Launch failures back off from 10 s, doubling, to 10 min (SPEC.md: nothing loops faster). */
export const LAUNCH_BACKOFF_MS = { first: 10_000, max: 600_000 } as const;

export function launchBackoffMs(failures: number): number {
  return Math.min(LAUNCH_BACKOFF_MS.first * 2 ** Math.max(0, failures - 1), LAUNCH_BACKOFF_MS.max);
}

export type LaunchOutcome =
  | { kind: "launched"; costPerHour: number; machineId: string | null; market: string | null }
  /** The budget leaves no room: nothing rented, the launch backs off. */
  | { kind: "held"; detail: string }
  /** Failed (event launch_failed, backoff), or its outcome is unknown (the reconciler settles it): the round launches no more. */
  | { kind: "failed" }
  /** A move to a bid found none cheap enough: nothing rented; looked at again after GPU_ENDPOINT_MIX_RECHECK_MS. */
  | { kind: "waiting" };

/** A creation that failed in `market` while other markets remain: tried again there, in the same round. */
type Elsewhere = { kind: "elsewhere"; market: string };

export interface LaunchDeps {
  ctx: GpuContext;
  endpoints: EndpointStore;
  events: EndpointEventStore;
  settings: Pick<EndpointConfig, "mixRecheckMs">;
  /** Whether this process still leads; false stops the rental before the marketplace is asked. */
  confirmLead(): Promise<boolean>;
  /** Each market's own backoff after a launch failed there (market-backoff.ts); absent: none kept. */
  marketBackoff?: MarketBackoff;
}

/** What to rent: its slot's kind (capacity-mix.ts), and the machines its siblings are on (spread). */
export interface LaunchRequest extends LaunchKind {
  avoidMachineIds: readonly string[];
  /** The markets its siblings are rented on: with capacity.spread_markets, a launch goes to the emptiest close market. */
  replicaMarkets?: readonly string[];
  /** The way back from a fallback: the fallback's cost_per_hour; the bid must cost at most 90% of it. */
  replacing?: number;
  /** The misplaced replica this launch takes the place of (capacity-mix.ts): its own backoff. */
  replaces?: string;
}

export async function launchReplica(deps: LaunchDeps, endpoint: EndpointRecord, priceCap: number, request: LaunchRequest): Promise<LaunchOutcome> {
  const { ctx, endpoints } = deps;
  const budgetText = `$${roundMoney(priceCap)}/h left of its $${endpoint.maxCostPerHour}/h budget`;
  if (priceCap <= 0) return holdBack(deps, endpoint, `one replica held back: ${budgetText}`, request);
  const creation: CreationRequest = {
    templateName: endpoint.templateName,
    customConfig: endpoint.customConfig,
    actor: ACTOR_SYSTEM,
    ...(request.interruptible ? { interruptible: { bidMargin: endpoint.capacity.bidMargin, onDemand: request.fallback, replacing: request.replacing } } : {}),
    avoidMachineIds: request.avoidMachineIds,
    markets: endpoint.capacity.markets,
    ...(endpoint.capacity.spreadMarkets ? { replicaMarkets: request.replicaMarkets ?? [] } : {}),
  };
  let chosen: Candidate[] | undefined;
  if (request.replaces !== undefined && request.interruptible && !request.fallback) {
    const looked = await lookForBids(deps, endpoint, creation, priceCap, request, budgetText);
    if (!Array.isArray(looked)) return looked;
    chosen = looked;
  }
  const allowed = endpoint.capacity.markets.length > 0 ? endpoint.capacity.markets : directoryOf(ctx.marketplace).names;
  let markets = deps.marketBackoff?.usable(endpoint.id, allowed) ?? [...allowed];
  for (;;) {
    const outcome = await launchOnce(deps, endpoint, priceCap, request, { ...creation, markets }, chosen, budgetText);
    if (outcome.kind === "launched" && outcome.market) deps.marketBackoff?.succeeded(endpoint.id, outcome.market);
    if (outcome.kind !== "elsewhere") return outcome;
    deps.marketBackoff?.failed(endpoint.id, outcome.market);
    markets = markets.filter((m) => m !== outcome.market);
    // The candidates chosen beforehand were the failed market's too: the next try searches again.
    chosen = undefined;
  }
}

/** One creation over `creation.markets`: launched, held, failed, or failed in one market with others left. */
async function launchOnce(
  deps: LaunchDeps,
  endpoint: EndpointRecord,
  priceCap: number,
  request: LaunchRequest,
  creation: CreationRequest,
  chosen: Candidate[] | undefined,
  budgetText: string,
): Promise<LaunchOutcome | Elsewhere> {
  const { ctx, endpoints } = deps;
  const instanceId = await ctx.instances.nextInstanceId();
  // The intent first (with its slot): should this process die from here on, the next round finds the row.
  await endpoints.replicas.insert(endpoint.id, instanceId, undefined, { interruptible: request.interruptible, fallback: false, replaces: request.replaces });
  const fence = {
    claimRecord: (trx: Knex.Transaction) => endpoints.replicas.claimRecord(instanceId, trx),
    async beforeRent() {
      if (!(await deps.confirmLead())) throw new UnavailableError("this process no longer leads the endpoint controller; nothing is rented");
    },
  };
  try {
    await createInstance(ctx, { ...creation, replicaOf: { instanceId, endpoint: endpoint.name, priceCap, fence }, ...(chosen ? { chosen } : {}) });
  } catch (err) {
    return failedLaunch(deps, endpoint, instanceId, err, priceCap, budgetText, request, creation.markets ?? []);
  }
  const record = await ctx.instances.get(instanceId);
  const costPerHour = record?.costPerHour ?? 0;
  const rented = record?.interruptible ? `a bid of $${record.bidPerHour}/h` : "on-demand";
  const machine = record ? `${record.gpuInfo.numGpus}x ${record.gpuInfo.gpuName} at $${costPerHour}/h (${rented})` : "a machine";
  const takesPlace = request.replaces ? ` to take ${request.replaces}'s place` : "";
  await note(deps, endpoint, "launched", `${instanceId} launched on ${machine}${takesPlace}`, instanceId);
  // A wait for a cheaper bid is over; the moves' failures count on until nothing is left to move.
  if (request.replaces) await endpoints.setControl(endpoint.id, { mixWaitSince: null });
  if (request.interruptible && record && !record.interruptible) {
    await endpoints.replicas.markFallback(instanceId);
    await note(deps, endpoint, "fallback", `${instanceId} rented on-demand in an interruptible slot: no bid fits for less than an on-demand machine`, instanceId);
  }
  return { kind: "launched", costPerHour, machineId: record?.machineId ?? null, market: record?.market ?? null };
}

async function failedLaunch(
  deps: LaunchDeps,
  endpoint: EndpointRecord,
  instanceId: string,
  err: unknown,
  priceCap: number,
  budgetText: string,
  request: LaunchRequest,
  markets: readonly string[],
): Promise<LaunchOutcome | Elsewhere> {
  const { ctx, endpoints } = deps;
  if (!(await deps.confirmLead())) {
    // The new leader sees the row (and its record, if any) and settles them; nothing more here.
    ctx.logger.warn({ err, endpoint: endpoint.name, instance_id: instanceId }, "replica launch stopped: this process no longer leads");
    return { kind: "failed" };
  }
  const record = await ctx.instances.get(instanceId);
  const failedIn = record?.market ?? undefined;
  const others = markets.filter((m) => m !== failedIn);
  const elsewhere = failedIn !== undefined && markets.includes(failedIn) && others.length > 0;
  // That market's failure alone: no backoff, the other markets are tried now.
  const tryElsewhere = async (): Promise<Elsewhere> => {
    await note(deps, endpoint, "launch_failed", `launch of ${instanceId} failed in ${failedIn}: ${failureText(err)}; trying ${others.join(", ")} now`, instanceId);
    return { kind: "elsewhere", market: failedIn! };
  };
  if (record?.status === "creating") {
    // Outcome unknown (the market's create answered 5xx or nothing, and its machine did not show
    // up under the label): the reconciler adopts the machine or fails the record, and the row
    // stays with it. With another market left, the endpoint does not wait for that: the row is
    // given up (destroyed once its machine shows up, dropped once the record fails, with no
    // failure counted) and the launch goes on in the other markets now.
    ctx.logger.warn({ err, endpoint: endpoint.name, instance_id: instanceId }, "replica launch outcome unknown; the reconciler settles it");
    if (!elsewhere) return { kind: "failed" }; // a failure is counted once, when the plan sees the record failed
    const detail = `${instanceId} given up: ${failedIn} did not say whether it rented it; its machine, if one shows up, is destroyed`;
    await endpoints.replicas.markDestroying(instanceId, { kind: "replaced", detail });
    return tryElsewhere();
  }
  if (record === null) await endpoints.replicas.forget(instanceId);
  // A round that saw the failed record meanwhile removed the replica and counted the failure: once only.
  else if (!(await endpoints.replicas.remove(instanceId))) return { kind: "failed" };
  if (elsewhere) return tryElsewhere();
  const templateMax = findTemplate(endpoint.templateName)?.config?.maxPrice ?? 0;
  // A bid-only launch (a move to a bid, a slot without fallback) that rents no bid failed: no budget hold.
  const bidOnly = request.interruptible && !request.fallback;
  if (err instanceof NotFoundError && record === null && priceCap < templateMax && !bidOnly) {
    // Nothing fits what is left of the budget: a hold, unless nothing fits the template at all.
    if (await anyOfferFits(ctx, endpoint.templateName, endpoint.customConfig, endpoint.capacity.markets)) {
      return holdBack(deps, endpoint, `one replica held back: no offer fits the ${budgetText}`, request);
    }
  }
  await launchFailed(deps, endpoint, `launch of ${instanceId}${request.replaces ? ` to take ${request.replaces}'s place` : ""} failed: ${failureText(err)}`, instanceId, request);
  return { kind: "failed" };
}

/**
 * A move to a bid looks at the market first, with nothing written yet: the offers to rent, or, with
 * none to take (none cheap enough, none at all), a wait; only a search that fails is a failed move.
 */
async function lookForBids(
  deps: LaunchDeps,
  endpoint: EndpointRecord,
  creation: CreationRequest,
  priceCap: number,
  request: LaunchRequest,
  budgetText: string,
): Promise<Candidate[] | LaunchOutcome> {
  const move = `the move of ${request.replaces}`;
  try {
    const choice = await chooseInterruptible(deps.ctx, creation, priceCap);
    if (!choice.none) return choice.candidates;
    // No bid to take (a market run dry, or none within the budget) is no failed rental either: the
    // fallback serves meanwhile, and the next look comes a recheck later, not a backoff later.
    const why = choice.none.kind === "nothing-fits" ? `no bid fits the ${budgetText}` : nothingToRentText(choice.none);
    return await waitForBids(deps, endpoint, request, why);
  } catch (err) {
    await launchFailed(deps, endpoint, `${move} failed: ${failureText(err)}`, undefined, request);
  }
  return { kind: "failed" };
}

/** No bid cheap enough for a move: it is looked at again a recheck later; the event only when the wait starts. */
async function waitForBids(deps: LaunchDeps, endpoint: EndpointRecord, request: LaunchRequest, why: string): Promise<LaunchOutcome> {
  const nextMixAt = new Date(Date.now() + deps.settings.mixRecheckMs);
  const starts = await deps.endpoints.waitForBids(endpoint.id, nextMixAt);
  endpoint.nextMixAt = nextMixAt;
  if (starts) {
    endpoint.mixWaitSince = new Date();
    const every = `looked at again every ${deps.settings.mixRecheckMs / 1000} s until one does`;
    await note(deps, endpoint, "fallback", `${request.replaces} stays until a bid takes its place: ${why}; ${every}`, request.replaces);
  }
  return { kind: "waiting" };
}

/** A launch failed: an event, and the next launch (of its kind: a move of the mix, or any other) waits (exponential backoff). */
export async function launchFailed(
  deps: Pick<LaunchDeps, "endpoints" | "events">,
  endpoint: EndpointRecord,
  detail: string,
  instanceId?: string,
  request?: Pick<LaunchRequest, "replaces">,
): Promise<void> {
  const delay = await backOff(deps, endpoint, request);
  await note(deps, endpoint, "launch_failed", `${detail}; next ${request?.replaces ? "move of the mix" : "launch"} in ${delay / 1000} s`, instanceId);
}

async function holdBack(deps: LaunchDeps, endpoint: EndpointRecord, detail: string, request: LaunchRequest): Promise<LaunchOutcome> {
  if (request.replaces) {
    // At full strength: a move the budget leaves no room for waits, and says so, but holds nothing back.
    await launchFailed(deps, endpoint, `the move of ${request.replaces} waits: ${detail}`, undefined, request);
    return { kind: "failed" };
  }
  await backOff(deps, endpoint);
  return { kind: "held", detail };
}

/** Counts one more launch that did not go through and closes its gate for the backoff; returns the delay. */
async function backOff(deps: Pick<LaunchDeps, "endpoints">, endpoint: EndpointRecord, request?: Pick<LaunchRequest, "replaces">): Promise<number> {
  const gate = request?.replaces ? ({ failures: "mixFailures", next: "nextMixAt" } as const) : ({ failures: "launchFailures", next: "nextLaunchAt" } as const);
  const failures = endpoint[gate.failures] + 1;
  const delay = launchBackoffMs(failures);
  const fields = { [gate.failures]: failures, [gate.next]: new Date(Date.now() + delay) };
  await deps.endpoints.setControl(endpoint.id, fields);
  Object.assign(endpoint, fields);
  return delay;
}

function note(deps: Pick<LaunchDeps, "events">, endpoint: EndpointRecord, kind: "launched" | "launch_failed" | "fallback", detail: string, instanceId?: string) {
  return deps.events.append({ endpointId: endpoint.id, kind, detail, instanceId: instanceId ?? null });
}

/** An error's message, with its cause's (a marketplace's own words) when it wraps one. */
function failureText(err: unknown): string {
  const cause = err instanceof Error ? err.cause : undefined;
  return cause instanceof Error ? `${messageOf(err)} (${cause.message})` : messageOf(err);
}
