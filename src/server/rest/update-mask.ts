import type { DescField, DescMessage, JsonObject } from "@bufbuild/protobuf";

// PATCH bodies and null (as grpc-gateway does for AIP-134 update masks): proto3 JSON reads a
// null field as one left out, so `{"autoscale": null}` alone could not clear anything. A PATCH
// whose request carries `google.protobuf.FieldMask update_mask` and whose body does not give one
// gets the body's top-level keys as its mask: the service then sees every key the caller wrote,
// null ones included.

const MASK_NAME = "update_mask";

/** The request's update mask field, when it has one of type FieldMask. */
export function updateMaskField(schema: DescMessage): DescField | undefined {
  const field = schema.fields.find((f) => f.name === MASK_NAME);
  return field?.fieldKind === "message" && field.message.typeName === "google.protobuf.FieldMask" ? field : undefined;
}

/**
 * Fills the mask of a PATCH request's JSON from its body's keys (in FieldMask's JSON form:
 * lowerCamelCase, comma-separated), unless the body names it itself. `pathParams` (bound by the
 * path, not the body) are not changes.
 */
export function withDerivedMask(schema: DescMessage, json: JsonObject, body: JsonObject, pathParams: readonly string[]): void {
  const mask = updateMaskField(schema);
  if (!mask || mask.name in body || mask.jsonName in body) return;
  const paths = Object.keys(body)
    .map((key) => schema.fields.find((f) => f.name === key || f.jsonName === key))
    .filter((f): f is DescField => f !== undefined && f !== mask && !pathParams.includes(f.name))
    .map((f) => f.jsonName);
  if (paths.length > 0) json[mask.name] = [...new Set(paths)].join(",");
}
