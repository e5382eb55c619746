import type { Logger } from "pino";
import type { GpuContext } from "../gpu-context.js";
import type { LoadStore } from "../endpoints/load/load-store.js";
import type { TrafficStore } from "../endpoints/load/traffic-store.js";
import type { EndpointStore } from "../endpoints/resource/endpoint-store.js";
import { endpointMessage } from "../endpoints/resource/endpoint-view.js";
import { replicaFactsOf } from "../endpoints/replicas/replica-facts.js";
import type { HistorySample, HistoryStore } from "./history-store.js";

// The minute sampler of the endpoints' history, run by the sync leader's endpoint loop (no timer
// of its own): once a minute has ended (and every process has had time to publish its last
// second), each live endpoint gets one sample: the minute's traffic summed over every process,
// its load summed the same way, its ready and target replicas and its $/h as the endpoint's answer
// shows them now. A minute no process led has no sample. Once an hour it prunes: history older
// than HISTORY_DAYS, traffic minutes already sampled.

export interface HistorySampler {
  /** Samples the last minute that ended, unless it already was; prunes when an hour has passed. */
  sampleDue(): Promise<void>;
}

export interface HistorySamplerDeps {
  ctx: Pick<GpuContext, "instances">;
  endpoints: EndpointStore;
  load: Pick<LoadStore, "readLoad">;
  traffic: TrafficStore;
  history: HistoryStore;
  historyDays: number;
  logger: Logger;
  now?: () => number;
}

const MINUTE_MS = 60_000;
/** A minute is sampled this long after its end: every process publishes its traffic each second. */
export const SETTLE_MS = 3_000;
const PRUNE_EVERY_MS = 3_600_000;
/** Traffic minutes are kept this long: a new leader can still sample the minutes just before it. */
const TRAFFIC_KEEP_MS = 15 * MINUTE_MS;

export function createHistorySampler(deps: HistorySamplerDeps): HistorySampler {
  const now = deps.now ?? Date.now;
  let sampledUpTo: number | undefined;
  let prunedAt = 0;

  async function sampleMinute(end: Date): Promise<HistorySample[]> {
    const live = await deps.endpoints.listLive();
    if (live.length === 0) return [];
    const traffic = await deps.traffic.sumMinute(new Date(end.getTime() - MINUTE_MS));
    const loads = await deps.load.readLoad(live.map((e) => e.id));
    return Promise.all(
      live.map(async (endpoint) => {
        const view = endpointMessage(endpoint, await replicaFactsOf({ ctx: deps.ctx, endpoints: deps.endpoints }, endpoint), 0);
        const load = loads.get(endpoint.id)!;
        const minute = traffic.get(endpoint.name) ?? { counts: { ok: 0, clientError: 0, serverError: 0, held: 0, continued: 0, cut: 0 }, firstByte: [] };
        return {
          ...minute,
          endpointId: endpoint.id,
          at: end,
          load: load.inFlight + load.held,
          held: load.held,
          readyReplicas: view.readyReplicas ?? 0,
          targetReplicas: view.replicas ?? 0,
          costPerHour: view.costPerHour ?? 0,
        };
      }),
    );
  }

  async function prune(at: number): Promise<void> {
    const history = await deps.history.prune(new Date(at - deps.historyDays * 86_400_000));
    const traffic = await deps.traffic.prune(new Date(at - TRAFFIC_KEEP_MS));
    prunedAt = at;
    if (history > 0 || traffic > 0) deps.logger.info({ history_rows: history, traffic_rows: traffic }, "endpoint history pruned");
  }

  return {
    async sampleDue() {
      const at = now();
      const end = Math.floor((at - SETTLE_MS) / MINUTE_MS) * MINUTE_MS;
      // After a restart or a leader change, the table says which minute was sampled last.
      sampledUpTo ??= (await deps.history.lastSampleAt())?.getTime() ?? 0;
      if (end > sampledUpTo) {
        await deps.history.record(await sampleMinute(new Date(end)));
        sampledUpTo = end;
      }
      if (at - prunedAt >= PRUNE_EVERY_MS) await prune(at);
    },
  };
}
