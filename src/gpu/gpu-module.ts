import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import type { AppDeps, ServiceModule } from "../app.js";
import { registration } from "../server/app.js";
import { createGpuService } from "./gpu-service.js";

/** GpuService with its background work (status sync, reconciler). */
export function createGpuModule(_deps: AppDeps): ServiceModule {
  return {
    service: registration(GpuService, createGpuService()),
    async start() {},
    async stop() {},
  };
}
