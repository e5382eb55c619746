import { randomBytes } from "node:crypto";
import { Client } from "@elastic/elasticsearch";

/** The real Elasticsearch of this test run (see global-setup.ts). */
export function elasticsearchUrl(): string {
  const url = process.env.ELASTICSEARCH_URL;
  if (!url) throw new Error("ELASTICSEARCH_URL is not set: the global setup did not start Elasticsearch");
  return url;
}

export function createTestElasticsearch(): Client {
  return new Client({ node: elasticsearchUrl(), requestTimeout: 30_000 });
}

/** An index name no other test uses. */
export function uniqueIndexName(prefix: string): string {
  return `${prefix}_${randomBytes(4).toString("hex")}`;
}
