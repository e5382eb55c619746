import type { Client } from "@elastic/elasticsearch";
import type { Logger } from "pino";
import { IndexingError, isUnreachable } from "../indexing-error.js";

// Cursor and incremental runs write through the alias into the live index, which refreshes every
// second. That suits the usual small run; a large one (a mass change, every row 'N' after a
// reload) would make a new segment every second and spend the cluster's CPU merging them. Once a
// run has sent LARGE_RUN_DOCS documents, its index's refreshes are paused until the run ends:
// the documents are durable as each bulk is acknowledged (translog durability stays `request`),
// searches keep the documents they had, and the run's changes become searchable together when it
// ends. A run that dies leaves the pause behind; the next run of any mode lifts it first.

/** Documents a run sends through the alias before its index's refreshes pause. */
const LARGE_RUN_DOCS = 50_000;

const LIVE_REFRESH = "1s";

export interface RefreshPause {
  /** Called as bulks settle with the documents sent so far; pauses refreshes past the threshold. */
  onBulkSettled(sent: number): Promise<void>;
  /** Restores the live refresh interval if this run paused it. */
  end(): Promise<void>;
}

export function pauseRefreshWhenLarge(client: Client, alias: string, logger: Logger, threshold = LARGE_RUN_DOCS): RefreshPause {
  let paused = false;
  return {
    async onBulkSettled(sent) {
      if (paused || sent < threshold) return;
      paused = true;
      await putRefresh(client, alias, "-1");
      logger.info({ sent }, "a large run: refreshes paused until it ends");
    },
    async end() {
      if (paused) await putRefresh(client, alias, LIVE_REFRESH);
    },
  };
}

/** Lifts a pause left by a run that died; returns whether there was one. */
export async function endLeftoverPause(client: Client, alias: string): Promise<boolean> {
  let settings;
  try {
    settings = await client.indices.getSettings({ index: alias, name: "index.refresh_interval", ignore_unavailable: true, allow_no_indices: true });
  } catch (err) {
    throw new IndexingError("OPTIMIZE_FAILED", `reading the refresh_interval of '${alias}' failed`, { cause: err, unavailable: isUnreachable(err) });
  }
  const paused = Object.values(settings).some((index) => index.settings?.index?.refresh_interval === "-1");
  if (paused) await putRefresh(client, alias, LIVE_REFRESH);
  return paused;
}

async function putRefresh(client: Client, alias: string, interval: string): Promise<void> {
  try {
    await client.indices.putSettings({ index: alias, settings: { index: { refresh_interval: interval } } });
  } catch (err) {
    throw new IndexingError("OPTIMIZE_FAILED", `setting refresh_interval ${interval} on '${alias}' failed`, { cause: err, unavailable: isUnreachable(err) });
  }
}
