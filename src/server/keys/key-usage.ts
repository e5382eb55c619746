import type { KeyUsage, KeyUsageEntry } from "../../module.js";

// What each caller used through this process's proxy, per endpoint and minute (module.ts,
// KeyUsage): absolute counts that the GPU module upserts with the traffic about once a second, so
// that a write retried after a failure counts nothing twice and the database sees one statement a
// second per process, never one per request.

/** Minutes kept after they end: room for a publish that failed a few times (the database away). */
const KEEP_MINUTES = 5;
const MINUTE_MS = 60_000;

interface Minute {
  entry: KeyUsageEntry;
  changedAt: number;
}

export function createKeyUsage(now: () => number = Date.now): KeyUsage {
  const minutes = new Map<string, Minute>();
  const minuteOf = (caller: string, endpointName: string): Minute => {
    const at = now();
    const start = at - (at % MINUTE_MS);
    const key = `${start}\n${endpointName}\n${caller}`;
    let minute = minutes.get(key);
    if (minute === undefined) {
      const entry = { caller, endpointName, minute: new Date(start), requests: 0, promptTokens: 0, completionTokens: 0, estimated: 0, refused: {}, lastAnsweredAt: null as Date | null };
      minute = { entry, changedAt: at };
      minutes.set(key, minute);
    }
    minute.changedAt = at;
    return minute;
  };
  return {
    settled({ endpoint, caller, usage }) {
      const { entry, changedAt } = minuteOf(caller, endpoint);
      entry.requests += 1;
      entry.lastAnsweredAt = new Date(changedAt);
      entry.promptTokens += usage.promptTokens;
      entry.completionTokens += usage.completionTokens;
      if (usage.estimated) entry.estimated += 1;
    },
    refused(caller, endpointName, reason) {
      const { refused } = minuteOf(caller, endpointName).entry;
      refused[reason] = (refused[reason] ?? 0) + 1;
    },
    changedSince(since) {
      const oldest = now() - (KEEP_MINUTES + 1) * MINUTE_MS;
      const changed: KeyUsageEntry[] = [];
      for (const [key, minute] of minutes) {
        if (minute.entry.minute.getTime() < oldest) minutes.delete(key);
        else if (minute.changedAt >= since) changed.push(structuredClone(minute.entry));
      }
      return changed;
    },
  };
}
