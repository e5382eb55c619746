import type { ServiceImpl } from "@connectrpc/connect";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { GpuService } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { excerpt, NotFoundError } from "../../errors.js";
import { roundMoney } from "../money/cost.js";
import type { EndpointStore } from "../endpoints/resource/endpoint-store.js";
import { firstByteQuantile } from "./first-byte.js";
import type { HistoryStore } from "./history-store.js";
import { historyWindow, type HistoryWindow } from "./history-window.js";
import type { SpendStore } from "./spend-store.js";

// The history RPCs (SPEC.md section 5, "History"): an endpoint's points and the fleet's spend
// over a window. The percentiles are computed here from the summed histograms, once per point.

type HistoryRpcs = Pick<ServiceImpl<typeof GpuService>, "getEndpointHistory" | "getSpend">;

export interface HistoryRpcsOptions {
  endpoints: Pick<EndpointStore, "getByName">;
  history: HistoryStore;
  spend: SpendStore;
  /** HISTORY_DAYS: how far back a window may reach. */
  historyDays: number;
}

export function createHistoryRpcs(options: HistoryRpcsOptions): HistoryRpcs {
  const { endpoints, history, spend, historyDays } = options;
  const windowOf = (req: { from?: Timestamp; to?: Timestamp; stepS?: number }): HistoryWindow =>
    historyWindow({ from: req.from && timestampDate(req.from), to: req.to && timestampDate(req.to), stepS: req.stepS }, historyDays);
  const windowMessage = (w: HistoryWindow) => ({ from: timestampFromDate(w.from), to: timestampFromDate(w.to), stepS: w.stepS });

  return {
    async getEndpointHistory(req) {
      const window = windowOf(req);
      const endpoint = await endpoints.getByName(req.name);
      if (!endpoint) throw new NotFoundError(`Endpoint '${excerpt(req.name)}' not found`);
      const points = await history.points(endpoint.id, window);
      return {
        ...windowMessage(window),
        points: points.map((p) => ({
          at: timestampFromDate(p.at),
          load: p.load,
          held: p.held,
          readyReplicas: p.readyReplicas,
          targetReplicas: p.targetReplicas,
          requests: {
            ok: p.counts.ok,
            clientError: p.counts.clientError,
            serverError: p.counts.serverError,
            held: p.counts.held,
            continued: p.counts.continued,
            cut: p.counts.cut,
          },
          firstByteP50Ms: roundMs(firstByteQuantile(p.firstByte, 0.5)),
          firstByteP99Ms: roundMs(firstByteQuantile(p.firstByte, 0.99)),
          costPerHour: roundMoney(p.costPerHour),
        })),
      };
    },
    async getSpend(req) {
      const window = windowOf(req);
      const points = await spend.points(window);
      return {
        ...windowMessage(window),
        points: points.map((p) => ({ at: timestampFromDate(p.at), costPerHour: roundMoney(p.costPerHour), totalCost: roundMoney(p.totalCost) })),
      };
    },
  };
}

function roundMs(ms: number | undefined): number | undefined {
  return ms === undefined ? undefined : Math.round(ms * 10) / 10;
}
