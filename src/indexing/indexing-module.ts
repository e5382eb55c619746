import { IndexingService } from "../../gen/search/v1/indexing_service_pb.js";
import type { AppDeps, ServiceModule } from "../app.js";
import { registration } from "../server/app.js";
import { createIndexingService } from "./indexing-service.js";

/** IndexingService with its background work (cron runner). */
export function createIndexingModule(_deps: AppDeps): ServiceModule {
  return {
    service: registration(IndexingService, createIndexingService()),
    async start() {},
    async stop() {},
  };
}
