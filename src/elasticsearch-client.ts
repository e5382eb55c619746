import { Client, SniffingTransport, type TransportRequestOptions, type TransportRequestParams } from "@elastic/elasticsearch";

// The one Elasticsearch client of the process. A node that refuses connections must surface as
// 503 within about a second (SPEC.md section 4): the client's default backoff between retries
// (1 to 2 s, then 2 to 4 s) made every indexing request wait 4 to 5 s. Retries stay, for a
// node that blips, but wait at most a few hundred milliseconds in all. With several nodes a
// retry goes to the next node first.

const MAX_RETRIES = 2;
// A bulk's own wait for a lost shard stays below this (BULK_SHARD_WAIT in indexing/pipeline/bulk-sender.ts).
const BULK_REQUEST_TIMEOUT_MS = 60_000;

/** Seconds to wait before retry `attempt` (1-based): 0.1 to 0.2, then 0.2 to 0.4. */
export function fastRetryBackoff(_min: number, _max: number, attempt: number): number {
  const ceiling = 0.1 * 2 ** (attempt - 1);
  return ceiling + Math.random() * ceiling;
}

// The client takes no backoff option; its transport takes one per request.
class FastRetryTransport extends SniffingTransport {
  override request(params: TransportRequestParams, options: TransportRequestOptions = {}): Promise<any> {
    return super.request(params, { retryBackoff: fastRetryBackoff, ...options });
  }
}

/** `urls`: one node URL or a comma-separated list (ELASTICSEARCH_URL). */
export function createElasticsearchClient(urls: string): Client {
  return new Client({
    nodes: splitNodeUrls(urls),
    requestTimeout: BULK_REQUEST_TIMEOUT_MS,
    maxRetries: MAX_RETRIES,
    Transport: FastRetryTransport,
  });
}

export function splitNodeUrls(urls: string): string[] {
  return urls
    .split(",")
    .map((url) => url.trim())
    .filter((url) => url !== "");
}
