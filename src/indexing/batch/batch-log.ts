import { errors, type Client } from "@elastic/elasticsearch";
import type { estypes } from "@elastic/elasticsearch";
import { UnavailableError } from "../../errors.js";

// One document per batch execution in the log index. The index gets its own explicit, strict
// mapping so that a stray field or a dynamically guessed type cannot creep in; documents are
// keyed by batch_id, so saving the same execution twice leaves one document.

export type BatchStatus = "COMPLETED" | "FAILED";

export interface BatchErrorInfo {
  code: string;
  message: string;
  /** The pipeline step that failed: load, index, log or batch. */
  step: string;
}

export interface BatchLogDetails {
  fetched_count: number;
  indexed_count: number;
  failed_count: number;
  source_index?: string;
  target_index?: string;
  job_type?: string;
  chunk_size?: number;
  message?: string;
  error?: BatchErrorInfo;
  /** Documents removed by the indexing step (delisted or deleted products). */
  removed_count?: number;
  /** Eligible rows minus documents, measured at the end of the indexing step. */
  drift?: number;
}

/** The stored document, in the snake_case of the contract. */
export interface BatchLogDocument {
  batch_id: string;
  job_name: string;
  status: BatchStatus;
  started_at: string;
  finished_at: string;
  elapsed_ms: number;
  details: BatchLogDetails;
  /** Who ran the batch (src/actor.ts); absent on documents saved before actors were. */
  actor?: string;
}

const keyword = { type: "keyword" } as const;
const integer = { type: "integer" } as const;

export const BATCH_LOG_MAPPING: estypes.MappingTypeMapping = {
  dynamic: "strict",
  properties: {
    batch_id: keyword,
    job_name: keyword,
    status: keyword,
    started_at: { type: "date" },
    finished_at: { type: "date" },
    elapsed_ms: { type: "long" },
    actor: keyword,
    details: {
      properties: {
        fetched_count: integer,
        indexed_count: integer,
        failed_count: integer,
        source_index: keyword,
        target_index: keyword,
        job_type: keyword,
        chunk_size: integer,
        message: { type: "text" },
        error: { properties: { code: keyword, message: { type: "text" }, step: keyword } },
        removed_count: integer,
        drift: integer,
      },
    },
  },
};

export class BatchLogStore {
  /** True once this process has made sure the index exists with the current mapping. */
  private ready = false;

  private constructor(
    private readonly elasticsearch: Client,
    private readonly index: string,
  ) {}

  static create(options: { elasticsearch: Client; index: string }): BatchLogStore {
    return new BatchLogStore(options.elasticsearch, options.index);
  }

  /** Saves one execution, creating the log index with its mapping when it is missing. */
  async save(document: BatchLogDocument): Promise<void> {
    await this.ensureIndex();
    // Refreshed at once: a caller that lists the logs right after the batch answered sees it.
    await this.elasticsearch.index({ index: this.index, id: document.batch_id, document, refresh: true });
  }

  /** The newest `limit` executions, newest first; none when the log index does not exist yet. */
  async list(limit: number): Promise<BatchLogDocument[]> {
    try {
      const result = await this.elasticsearch.search<BatchLogDocument>({
        index: this.index,
        size: limit,
        sort: [{ started_at: "desc" }, { batch_id: "desc" }],
      });
      return result.hits.hits.flatMap((hit) => (hit._source ? [hit._source] : []));
    } catch (err) {
      if (isIndexNotFound(err)) return [];
      if (err instanceof errors.ConnectionError || err instanceof errors.TimeoutError) {
        throw new UnavailableError("the search engine is unreachable", { cause: err });
      }
      throw err;
    }
  }

  private async ensureIndex(): Promise<void> {
    if (this.ready) return;
    if (await this.elasticsearch.indices.exists({ index: this.index })) {
      // An index created by an earlier version gains the fields added since (mappings only grow).
      await this.elasticsearch.indices.putMapping({ index: this.index, ...BATCH_LOG_MAPPING });
    } else {
      try {
        await this.elasticsearch.indices.create({ index: this.index, mappings: BATCH_LOG_MAPPING });
      } catch (err) {
        // Another replica created it between the check and the create: fine.
        if (!(err instanceof errors.ResponseError && err.body?.error?.type === "resource_already_exists_exception")) throw err;
      }
    }
    this.ready = true;
  }
}

function isIndexNotFound(err: unknown): boolean {
  return err instanceof errors.ResponseError && err.statusCode === 404;
}
