import { ScalarType, type DescEnum, type DescField, type DescMessage, type JsonObject } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { updateMaskField } from "../rest/update-mask.js";
import type { ProtoComments } from "./proto-comments.js";

// JSON Schemas (2020-12, as OpenAPI 3.1 uses them) of proto messages in the REST JSON form:
// proto field names, int64 as decimal strings, well-known types in their JSON mapping.

export interface SchemaRegistryOptions {
  comments: ProtoComments;
  /** JSON Schema keywords merged into a field's schema, by qualified field name. */
  fieldHints: Readonly<Record<string, JsonObject>>;
  /** Messages that requests carry: they reject unknown fields and require nothing. */
  requestMessages: ReadonlySet<string>;
  /** Messages held inside request bodies (and maybe in answers too): none of their fields is required. */
  requestParts?: ReadonlySet<string>;
}

export interface SchemaRegistry {
  /** A reference to the message's component schema, adding it (and what it uses) on first use. */
  refOf(message: DescMessage): JsonObject;
  /** The schema of one field, with its comment and hints. */
  fieldSchema(field: DescField): JsonObject;
  /** Component schemas by message type name. */
  readonly schemas: Record<string, JsonObject>;
}

const WELL_KNOWN: Record<string, JsonObject> = {
  "google.protobuf.Timestamp": { type: "string", format: "date-time", description: "RFC 3339 time in UTC." },
  "google.protobuf.Duration": { type: "string", pattern: "^-?[0-9]+(\\.[0-9]+)?s$", description: "Seconds with an s suffix." },
  "google.protobuf.Struct": { type: "object", additionalProperties: true },
  "google.protobuf.Value": {},
  "google.protobuf.ListValue": { type: "array" },
  "google.protobuf.Empty": { type: "object", additionalProperties: false },
  "google.protobuf.FieldMask": { type: "string", description: "Field names, comma-separated." },
};

export function createSchemaRegistry(options: SchemaRegistryOptions): SchemaRegistry {
  const { comments, fieldHints, requestMessages, requestParts = new Set<string>() } = options;
  const schemas: Record<string, JsonObject> = {};

  const refOf = (message: DescMessage): JsonObject => {
    const wellKnown = WELL_KNOWN[message.typeName];
    if (wellKnown) return { ...wellKnown };
    if (message.file.name.startsWith("google/protobuf/")) {
      throw new Error(`no JSON schema for ${message.typeName}: add its JSON mapping to json-schema.ts`);
    }
    if (!(message.typeName in schemas)) {
      schemas[message.typeName] = {};
      schemas[message.typeName] = messageSchema(message);
    }
    return { $ref: `#/components/schemas/${message.typeName}` };
  };

  const messageSchema = (message: DescMessage): JsonObject => {
    const isRequest = requestMessages.has(message.typeName);
    const properties: JsonObject = {};
    for (const field of message.fields) properties[field.name] = fieldSchema(field);
    // Responses always carry fields without presence (lists, maps, plain scalars), even when empty.
    // A part of a request body may omit them too (an endpoint's capacity.markets).
    const required = isRequest || requestParts.has(message.typeName) ? [] : message.fields.filter(alwaysEmitted).map((f) => f.name);
    return {
      type: "object",
      ...describe(comments.get(message.typeName)),
      properties,
      ...(required.length > 0 ? { required } : {}),
      ...(isRequest ? { additionalProperties: false } : {}),
    };
  };

  const fieldSchema = (field: DescField): JsonObject => {
    const qualified = `${field.parent.typeName}.${field.name}`;
    const schema = { ...valueSchema(field), ...describe(comments.get(qualified)), ...fieldHints[qualified] };
    return isClearable(field) ? orNull(schema) : schema;
  };

  const valueSchema = (field: DescField): JsonObject => {
    switch (field.fieldKind) {
      case "scalar":
        return scalarSchema(field.scalar);
      case "enum":
        return enumSchema(field.enum);
      case "message":
        return refOf(field.message);
      case "list":
        return { type: "array", items: elementSchema(field.listKind, field) };
      case "map":
        return { type: "object", additionalProperties: elementSchema(field.mapKind, field) };
    }
  };

  const elementSchema = (
    kind: "scalar" | "enum" | "message",
    field: { scalar?: ScalarType; enum?: DescEnum; message?: DescMessage },
  ): JsonObject => {
    if (kind === "message") return refOf(field.message!);
    if (kind === "enum") return enumSchema(field.enum!);
    return scalarSchema(field.scalar!);
  };

  const enumSchema = (desc: DescEnum): JsonObject => ({
    type: "string",
    enum: desc.values.map((v) => v.name),
    ...describe(comments.get(desc.typeName)),
  });

  // A request with an update mask clears a message field given as null (rest/update-mask.ts).
  const isClearable = (field: DescField): boolean => {
    const mask = updateMaskField(field.parent);
    return requestMessages.has(field.parent.typeName) && mask !== undefined && field !== mask && field.fieldKind === "message";
  };

  return { refOf, fieldSchema, schemas };
}

function orNull({ description, ...schema }: JsonObject): JsonObject {
  return { anyOf: [schema, { type: "null" }], ...(description !== undefined ? { description } : {}) };
}

function alwaysEmitted(field: DescField): boolean {
  if (field.fieldKind === "list" || field.fieldKind === "map") return true;
  if (field.fieldKind === "message") return false;
  return field.presence === FeatureSet_FieldPresence.IMPLICIT;
}

function scalarSchema(scalar: ScalarType): JsonObject {
  switch (scalar) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.DOUBLE:
      return { type: "number", format: "double" };
    case ScalarType.FLOAT:
      return { type: "number", format: "float" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32" };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", format: "int32", minimum: 0 };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    default:
      // 64-bit integers travel as decimal strings in proto JSON (numbers above 2^53 lose digits).
      return { type: "string", pattern: "^-?[0-9]+$", description: "A 64-bit integer as a decimal string." };
  }
}

function describe(comment: string | undefined): JsonObject {
  return comment ? { description: comment } : {};
}
