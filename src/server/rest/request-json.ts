import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { InvalidInputError } from "../../errors.js";
import type { RouteMatch } from "./http-rules.js";
import { withDerivedMask } from "./update-mask.js";

/**
 * Builds the protobuf JSON of a request message from a REST call: the body (bound to "*" or to
 * one field), path parameters and query parameters, converted by field type with messages that
 * name the parameter. A PATCH body's keys become its update mask (update-mask.ts). Query parameters that name no field are rejected, so that a typo never
 * silently widens a filter.
 */
export function requestJsonOf(
  { route, params }: RouteMatch,
  query: URLSearchParams,
  body: JsonValue | undefined,
): JsonObject {
  const schema = route.method.input;
  const json: JsonObject = {};
  if (route.body === "*" && body !== undefined) {
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new InvalidInputError("request body must be a JSON object");
    }
    rejectUnknownKeys(schema, body, "");
    Object.assign(json, body);
    if (route.verb === "PATCH") withDerivedMask(schema, json, body, Object.keys(params));
  } else if (route.body !== "" && body !== undefined) {
    const field = fieldNamed(schema, route.body);
    if (field?.fieldKind === "message" && body !== null && typeof body === "object" && !Array.isArray(body)) {
      rejectUnknownKeys(field.message, body, "");
    }
    json[route.body] = body;
  }
  for (const [name, raw] of Object.entries(params)) {
    let value: string;
    try {
      value = decodeURIComponent(raw);
    } catch {
      throw new InvalidInputError(`path parameter '${name}' is not valid percent-encoding`, { extra: { field: name } });
    }
    json[name] = scalarFromText(fieldNamed(schema, name)!, value, "path parameter");
  }
  for (const name of new Set(query.keys())) {
    const field = fieldNamed(schema, name);
    if (field === undefined || field.name in json || field.name === route.body) {
      throw new InvalidInputError(`unknown query parameter '${name}'`, { extra: { field: name } });
    }
    const values = query.getAll(name);
    if (isTimestamp(field)) {
      if (values.length > 1) throw new InvalidInputError(`query parameter '${name}' is given more than once`, { extra: { field: name } });
      if (values[0]) json[field.name] = timestampFromText(field, values[0]);
    } else if (field.fieldKind === "list" && field.listKind === "scalar") {
      json[field.name] = values.map((v) => scalarFromText(field, v, "query parameter"));
    } else if (field.fieldKind === "scalar" || field.fieldKind === "enum") {
      if (values.length > 1) {
        throw new InvalidInputError(`query parameter '${name}' is given more than once`, { extra: { field: name } });
      }
      const value = values[0] ?? "";
      // An empty value means "not given" for anything but strings (e.g. `interval_minutes=`).
      if (value === "" && !(field.fieldKind === "scalar" && field.scalar === ScalarType.STRING)) continue;
      json[field.name] = scalarFromText(field, value, "query parameter");
    } else {
      throw new InvalidInputError(`'${name}' cannot be given as a query parameter`, { extra: { field: name } });
    }
  }
  return json;
}

/**
 * A body key that names no field answers 400 naming it and the keys the message accepts, as an
 * unknown query parameter does, down through nested messages (`custom_config.max_hours`).
 * Well-known types (Struct, Timestamp, ...) keep their own JSON forms and are not walked.
 */
function rejectUnknownKeys(schema: DescMessage, object: JsonObject, prefix: string): void {
  for (const [key, value] of Object.entries(object)) {
    const field = fieldNamed(schema, key);
    if (field === undefined) {
      const accepted = schema.fields.map((f) => f.name).join(", ");
      // The key is cut: a forged body must not make the answer as large as itself.
      throw new InvalidInputError(`unknown field '${prefix}${truncate(key)}' in the request body; accepted keys: ${accepted}`, {
        extra: { field: `${prefix}${truncate(key)}` },
      });
    }
    const nested = field.fieldKind === "message" ? field.message : undefined;
    if (nested && !nested.typeName.startsWith("google.protobuf.") && value !== null && typeof value === "object" && !Array.isArray(value)) {
      rejectUnknownKeys(nested, value, `${prefix}${field.name}.`);
    }
  }
}

/** A google.protobuf.Timestamp field: a query parameter in RFC 3339, as its JSON form is. */
export function isTimestamp(field: DescField): boolean {
  return field.fieldKind === "message" && field.message.typeName === "google.protobuf.Timestamp";
}

// RFC 3339 with its time zone (Z or an offset), as protobuf JSON takes it; fractions up to nanoseconds.
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

function timestampFromText(field: DescField, text: string): JsonValue {
  const ms = Date.parse(text);
  if (!RFC3339.test(text) || Number.isNaN(ms) || ms < Date.UTC(1, 0, 1) || ms >= Date.UTC(10000, 0, 1)) {
    throw new InvalidInputError(`query parameter '${field.name}' must be an RFC 3339 time such as 2026-11-28T09:00:00Z, got '${truncate(text)}'`, {
      extra: { field: field.name },
    });
  }
  return new Date(ms).toISOString();
}

function fieldNamed(schema: DescMessage, name: string): DescField | undefined {
  return schema.fields.find((f) => f.name === name || f.jsonName === name);
}

const INT32_TYPES = new Set([ScalarType.INT32, ScalarType.SINT32, ScalarType.SFIXED32]);
const UINT32_TYPES = new Set([ScalarType.UINT32, ScalarType.FIXED32]);
const INT64_TYPES = new Set([
  ScalarType.INT64,
  ScalarType.SINT64,
  ScalarType.SFIXED64,
  ScalarType.UINT64,
  ScalarType.FIXED64,
]);

const DECIMAL = /^-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

function scalarFromText(field: DescField, text: string, where: string): JsonValue {
  const fail = (expected: string) =>
    new InvalidInputError(`${where} '${field.name}' must be ${expected}, got '${truncate(text)}'`, {
      extra: { field: field.name },
    });
  if (field.fieldKind === "enum" || (field.fieldKind === "list" && field.listKind === "enum")) return text;
  const scalar = field.fieldKind === "scalar" || field.fieldKind === "list" ? field.scalar : undefined;
  if (scalar === undefined || scalar === ScalarType.STRING) return text;
  if (scalar === ScalarType.BOOL) {
    if (text === "true" || text === "false") return text === "true";
    throw fail("true or false");
  }
  if (INT32_TYPES.has(scalar) || UINT32_TYPES.has(scalar) || INT64_TYPES.has(scalar)) {
    if (!/^-?\d+$/.test(text)) throw fail("an integer");
    if (INT64_TYPES.has(scalar)) return text;
    const value = Number(text);
    const [min, max] = UINT32_TYPES.has(scalar) ? [0, 2 ** 32 - 1] : [-(2 ** 31), 2 ** 31 - 1];
    if (value < min || value > max) throw fail(`an integer from ${min} to ${max}`);
    return value;
  }
  if (scalar === ScalarType.DOUBLE || scalar === ScalarType.FLOAT) {
    // Decimal notation only: Number() would also take "0x10", " 5" or "1_0"-like surprises.
    const value = Number(text);
    if (!DECIMAL.test(text) || !Number.isFinite(value)) throw fail("a finite decimal number");
    return value;
  }
  return text;
}

function truncate(text: string): string {
  return text.length > 64 ? `${text.slice(0, 61)}...` : text;
}
