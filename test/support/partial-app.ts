import pino from "pino";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { listTemplates } from "../../src/gpu/creation/templates.js";
import { createAppHandler } from "../../src/server/app.js";
import { createTokenSource } from "../../src/server/auth/token-source.js";
import type { NodeHandler } from "../../src/server/node-http.js";
import { registration } from "../../src/server/service-registration.js";
import { createMetrics } from "../../src/server/metrics.js";

/**
 * The product's request handler with GpuService registered partially: only ListTemplates is
 * implemented, so every other RPC is "not implemented". No database, no search engine. With
 * `tokensFile` (an AUTH_TOKENS_FILE), auth is on.
 */
export function createTemplatesOnlyHandler(logger = pino({ level: "silent" }), tokensFile?: string): NodeHandler {
  return createAppHandler({
    services: [registration(GpuService, { listTemplates: () => ({ templates: [...listTemplates()] }) })],
    logger,
    tokens: createTokenSource({ envTokens: [], file: tokensFile, logger }),
    readiness: {},
    maxBodyBytes: 1024,
    metrics: createMetrics(),
  });
}
