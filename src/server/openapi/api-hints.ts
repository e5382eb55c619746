import type { JsonObject } from "@bufbuild/protobuf";

/**
 * What a service's code knows about its REST contract that proto3 cannot say: bounds, defaults
 * and allowed values of fields, required query parameters, and the error statuses of each RPC.
 * Each service declares its hints next to the constants its validation uses, so the document
 * states the bounds the code enforces. Every name must exist in the descriptors (checked at
 * start-up), so a hint cannot outlive its field.
 */
export interface ApiHints {
  /** JSON Schema keywords merged into a field's schema, by qualified field name ("gpu.v1.SearchOffersRequest.limit"). */
  readonly fields?: Readonly<Record<string, JsonObject>>;
  /** Query parameters the service requires although proto3 cannot mark them, by qualified field name. */
  readonly requiredParams?: readonly string[];
  /**
   * Error statuses an RPC answers besides those every route has (400, 500, 503, 401 with auth,
   * 404 with a path parameter, 413 with a body), by qualified method name ("gpu.v1.GpuService.CreateInstance").
   */
  readonly errors?: Readonly<Record<string, readonly number[]>>;
}

/** Merges the hints of several services into one. */
export function mergeApiHints(...all: readonly ApiHints[]): ApiHints {
  return {
    fields: Object.assign({}, ...all.map((h) => h.fields ?? {})),
    requiredParams: all.flatMap((h) => h.requiredParams ?? []),
    errors: Object.assign({}, ...all.map((h) => h.errors ?? {})),
  };
}
