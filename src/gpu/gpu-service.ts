import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { GpuService, ListTemplatesResponseSchema } from "../../gen/gpu/v1/gpu_service_pb.js";
import { NotFoundError } from "../errors.js";
import { findTemplate, listTemplates } from "./templates.js";

/** GpuService RPCs; those not implemented yet answer `unimplemented`. */
export function createGpuService(): Partial<ServiceImpl<typeof GpuService>> {
  return {
    listTemplates() {
      return create(ListTemplatesResponseSchema, { templates: [...listTemplates()] });
    },
    getTemplate({ templateName }) {
      const template = findTemplate(templateName);
      if (!template) throw new NotFoundError(`Template '${templateName}' not found`);
      return template;
    },
  };
}
