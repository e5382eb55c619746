import type { ServiceImpl } from "@connectrpc/connect";
import type { IndexingService } from "../../gen/search/v1/indexing_service_pb.js";

/** IndexingService RPCs; those not implemented yet answer `unimplemented`. */
export function createIndexingService(): Partial<ServiceImpl<typeof IndexingService>> {
  return {};
}
