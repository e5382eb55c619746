import type { Logger } from "pino";
import type { GpuContext } from "../gpu-context.js";
import type { LoadStore } from "../endpoints/load/load-store.js";
import type { TrafficCounts, TrafficStore } from "../endpoints/load/traffic-store.js";
import type { EndpointRecord, EndpointStore } from "../endpoints/resource/endpoint-store.js";
import { endpointMessage } from "../endpoints/resource/endpoint-view.js";
import { replicaFactsOf } from "../endpoints/replicas/replica-facts.js";
import type { HistorySample, HistoryStore } from "./history-store.js";

// The minute sampler of the endpoints' history, run by the sync leader's endpoint loop (no timer
// of its own): once a minute has ended (and every process has had time to publish its last
// second), each live endpoint gets one sample: the minute's traffic summed over every process,
// its load summed the same way, its ready and target replicas and its $/h as the endpoint's answer
// shows them now. Minutes no round sampled (a leader change, a database outage) are sampled late,
// as long as their traffic is still held: their traffic as counted, their load and replicas as
// the late round sees them. Traffic a process publishes after its minute was sampled (a process
// held up, a database away) is summed again into that minute. Each minute it also sets the keys'
// machine cost of the last minutes (server/keys/machine-cost-sql.ts). Once an hour it prunes:
// history and the keys' usage minutes older than HISTORY_DAYS, traffic minutes already sampled.

export interface HistorySampler {
  /** Samples every minute that ended and was not sampled yet, sums late traffic again; prunes when an hour has passed. */
  sampleDue(): Promise<void>;
}

export interface HistorySamplerDeps {
  ctx: Pick<GpuContext, "instances">;
  endpoints: EndpointStore;
  load: Pick<LoadStore, "readLoad">;
  traffic: TrafficStore;
  history: HistoryStore;
  /** The keys' usage minutes: their machine cost attributed here each minute, kept as long as the history. */
  keyUsage?: { attributeMachineCost(from: Date, to: Date): Promise<number>; prune(before: Date): Promise<number> };
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
/** Minutes missed are sampled late this far back: well within the traffic kept. */
export const CATCH_UP_MS = 10 * MINUTE_MS;
/**
 * A write stamped just before the last read of the traffic may commit just after it: the next
 * read looks this much further back (summing a minute again changes nothing when nothing came).
 */
const LATE_OVERLAP_MS = 5_000;

const NO_TRAFFIC: TrafficCounts = { counts: { ok: 0, clientError: 0, serverError: 0, held: 0, continued: 0, cut: 0 }, firstByte: [] };

type Observed = Omit<HistorySample, "at" | "counts" | "firstByte">;

export function createHistorySampler(deps: HistorySamplerDeps): HistorySampler {
  const now = deps.now ?? Date.now;
  let sampledUpTo: number | undefined;
  /** The database's clock at the last read of the traffic; undefined: every minute held is read again once. */
  let trafficReadAt: Date | undefined;
  let prunedAt = 0;

  /** Each live endpoint's load, replicas and $/h as they stand. */
  async function observe(live: readonly EndpointRecord[]): Promise<Map<string, Observed>> {
    const loads = await deps.load.readLoad(live.map((e) => e.id));
    const observed = await Promise.all(
      live.map(async (endpoint): Promise<[string, Observed]> => {
        const view = endpointMessage(endpoint, await replicaFactsOf({ ctx: deps.ctx, endpoints: deps.endpoints }, endpoint), 0);
        const load = loads.get(endpoint.id)!;
        return [
          endpoint.id,
          {
            endpointId: endpoint.id,
            load: load.inFlight + load.held,
            held: load.held,
            readyReplicas: view.readyReplicas ?? 0,
            targetReplicas: view.replicas ?? 0,
            costPerHour: view.costPerHour ?? 0,
          },
        ];
      }),
    );
    return new Map(observed);
  }

  /**
   * The samples of the minute ending at `end`. The minute just ended samples every live endpoint;
   * a minute sampled late only those that existed by its end.
   */
  async function sampleMinute(end: number, live: readonly EndpointRecord[], observed: Map<string, Observed>, latest: boolean): Promise<HistorySample[]> {
    const existing = latest ? live : live.filter((e) => e.createdAt.getTime() < end);
    if (existing.length === 0) return [];
    const traffic = await deps.traffic.sumMinute(new Date(end - MINUTE_MS));
    return existing.map((endpoint) => ({ ...observed.get(endpoint.id)!, ...(traffic.get(endpoint.name) ?? NO_TRAFFIC), at: new Date(end) }));
  }

  /** Sums again the minutes already sampled (ending by `upTo`) that a process wrote to since they were. */
  async function resumLate(minutes: readonly Date[], upTo: number, liveEndpoints: () => Promise<readonly EndpointRecord[]>): Promise<void> {
    const late = minutes.filter((start) => start.getTime() + MINUTE_MS <= upTo);
    if (late.length === 0) return;
    const byName = new Map((await liveEndpoints()).map((e) => [e.name, e.id]));
    let changed = 0;
    for (const start of late) {
      const traffic = await deps.traffic.sumMinute(start);
      const at = new Date(start.getTime() + MINUTE_MS);
      const samples = [...traffic].flatMap(([name, counts]) => (byName.has(name) ? [{ endpointId: byName.get(name)!, at, ...counts }] : []));
      changed += await deps.history.updateTraffic(samples);
    }
    if (changed > 0) deps.logger.debug({ samples: changed }, "late traffic summed into the endpoints' history");
  }

  async function prune(at: number): Promise<void> {
    const keep = new Date(at - deps.historyDays * 86_400_000);
    const history = await deps.history.prune(keep);
    const keyUsage = (await deps.keyUsage?.prune(keep)) ?? 0;
    const traffic = await deps.traffic.prune(new Date(at - TRAFFIC_KEEP_MS));
    prunedAt = at;
    if (history > 0 || traffic > 0 || keyUsage > 0) {
      deps.logger.info({ history_rows: history, traffic_rows: traffic, key_usage_rows: keyUsage }, "endpoint history pruned");
    }
  }

  return {
    async sampleDue() {
      const at = now();
      const end = Math.floor((at - SETTLE_MS) / MINUTE_MS) * MINUTE_MS;
      // After a restart or a leader change, the table says which minute was sampled last.
      sampledUpTo ??= (await deps.history.lastSampleAt())?.getTime() ?? 0;
      const sampledBefore = sampledUpTo;
      // Read before the sums below: whatever is written from here on is read again next round.
      const written = await deps.traffic.minutesWrittenSince(trafficReadAt && new Date(trafficReadAt.getTime() - LATE_OVERLAP_MS));
      // Most rounds have nothing to sample and no late traffic: they read no endpoint.
      let live: EndpointRecord[] | undefined;
      const liveEndpoints = async () => (live ??= await deps.endpoints.listLive());
      if (end > sampledUpTo) {
        const endpoints = await liveEndpoints();
        const observed = await observe(endpoints);
        for (let minute = Math.max(sampledUpTo + MINUTE_MS, end - CATCH_UP_MS); minute <= end; minute += MINUTE_MS) {
          await deps.history.record(await sampleMinute(minute, endpoints, observed, minute === end));
          sampledUpTo = minute;
        }
        // The keys' minutes as far back as late ones are sampled: each is attributed again, so
        // that a process's late rows or a machine's end recorded late corrects the split.
        await deps.keyUsage?.attributeMachineCost(new Date(end - CATCH_UP_MS), new Date(end));
      }
      await resumLate(written.minutes, sampledBefore, liveEndpoints);
      trafficReadAt = written.asOf;
      if (at - prunedAt >= PRUNE_EVERY_MS) await prune(at);
    },
  };
}
