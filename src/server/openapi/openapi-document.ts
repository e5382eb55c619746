import type { DescField, DescMessage, DescMethod, DescService, JsonObject } from "@bufbuild/protobuf";
import { scopeOfRpc } from "../auth/scope-table.js";
import { restRoutesOf, type RestRoute } from "../rest/http-rules.js";
import { isTimestamp } from "../rest/request-json.js";
import type { ApiHints } from "./api-hints.js";
import { createSchemaRegistry, type SchemaRegistry } from "./json-schema.js";
import type { ProtoComments } from "./proto-comments.js";

export interface OpenApiOptions {
  services: readonly DescService[];
  comments: ProtoComments;
  hints: ApiHints;
  /** Whether AUTH_TOKENS is set: then every operation needs the bearer token and may answer 401. */
  authEnabled: boolean;
  title: string;
  version: string;
}

/** The error statuses of SPEC.md section 1, with what each means here. */
const ERROR_STATUSES: Record<number, string> = {
  400: "Invalid input: malformed JSON, a wrong type, a value out of range, an unknown parameter.",
  401: "The bearer token is missing or wrong.",
  403: "The token is valid but lacks the scope this route needs; the detail names the scope.",
  404: "The path or a parameter names something that does not exist.",
  409: "A conflict: the offer was rented meanwhile, or an indexing job or batch is already running.",
  413: "The request body is larger than the configured limit.",
  429: "The create would push the fleet over GPU_MAX_FLEET_DPH.",
  500: "Unexpected server error (the message never carries internals).",
  503: "A dependency (database, search engine, marketplace) is unreachable.",
};

const ERROR_SCHEMA: JsonObject = {
  type: "object",
  description: "Every error answer: a human-readable `detail`, sometimes with the error `code` or the offending `field`.",
  properties: {
    detail: { type: "string" },
    code: { type: "string", description: "An error code, e.g. BULK_FAILED for indexing failures." },
    field: { type: "string", description: "The request field or parameter at fault." },
  },
  required: ["detail"],
};

/**
 * The OpenAPI 3.1 document of the REST routes, built from the same descriptors and
 * google.api.http annotations as the REST router (restRoutesOf), so the two cannot disagree.
 */
export function createOpenApiDocument(options: OpenApiOptions): JsonObject {
  const { services, comments, hints } = options;
  const routes = inProtoOrder(services, restRoutesOf(services));
  checkHintsNameRealThings(services, hints);
  const registry = createSchemaRegistry({
    comments,
    fieldHints: hints.fields ?? {},
    requestMessages: new Set(routes.flatMap((r) => bodyMessages(r).map((m) => m.typeName))),
    requestParts: partsOf(routes.flatMap(bodyMessages)),
  });
  const paths: Record<string, JsonObject> = {};
  for (const route of routes) {
    paths[route.pattern] ??= {};
    paths[route.pattern]![route.verb.toLowerCase()] = operationOf(route, registry, options);
  }
  const usedStatuses = new Set(
    Object.values(paths).flatMap((item) => Object.values(item).flatMap((op) => Object.keys((op as { responses: object }).responses))),
  );
  return {
    openapi: "3.1.0",
    info: {
      title: options.title,
      version: options.version,
      description:
        "JSON over HTTP for every RPC with a google.api.http annotation. The same RPCs are served over Connect, gRPC and gRPC-Web on the same port.",
    },
    tags: services.map((s) => ({ name: s.name, description: comments.get(s.typeName) ?? s.typeName })),
    ...(options.authEnabled ? { security: [{ bearer: [] }] } : {}),
    paths,
    components: {
      schemas: { Error: ERROR_SCHEMA, ...registry.schemas },
      responses: Object.fromEntries(
        Object.entries(ERROR_STATUSES)
          .filter(([status]) => usedStatuses.has(status))
          .map(([status, description]) => [
            `Error${status}`,
            { description, content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
          ]),
      ),
      // Only with auth on: Swagger UI shows its "Authorize" button for any declared scheme.
      ...(options.authEnabled
        ? { securitySchemes: { bearer: { type: "http", scheme: "bearer", description: "A token of AUTH_TOKENS (every scope) or of AUTH_TOKENS_FILE (its scopes); each operation lists the scope it needs." } } }
        : {}),
    },
  };
}

function operationOf(route: RestRoute, registry: SchemaRegistry, options: OpenApiOptions): JsonObject {
  const { method } = route;
  const qualified = `${method.parent.typeName}.${method.name}`;
  const comment = options.comments.get(qualified) ?? method.name;
  const required = new Set(options.hints.requiredParams ?? []);
  const parameters = [
    ...route.paramNames.map((name) => parameterOf(fieldOf(method.input, name), "path", true, registry)),
    ...queryFields(route).map((field) => parameterOf(field, "query", required.has(`${field.parent.typeName}.${field.name}`), registry)),
  ];
  const body = requestBodyOf(route, registry);
  const statuses = new Set([400, 500, 503, ...(options.hints.errors?.[qualified] ?? [])]);
  const scope = scopeOfRpc(method.parent.typeName, method.name);
  if (options.authEnabled) {
    statuses.add(401);
    statuses.add(403);
  }
  if (route.paramNames.length > 0) statuses.add(404);
  if (body) statuses.add(413);
  const responses: JsonObject = {
    200: { description: "OK", content: { "application/json": { schema: registry.refOf(method.output) } } },
  };
  for (const status of [...statuses].sort()) responses[status] = { $ref: `#/components/responses/Error${status}` };
  return {
    tags: [method.parent.name],
    operationId: `${method.parent.name}_${method.name}`,
    summary: firstSentence(comment),
    description: `${comment}\n\nRPC: \`${method.parent.typeName}/${method.name}\`; scope: \`${scope ?? "none (refused)"}\``,
    // OpenAPI 3.1 lets a bearer requirement list role names: here the scope the token needs.
    ...(options.authEnabled ? { security: [{ bearer: scope ? [scope] : [] }] } : {}),
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(body ? { requestBody: body } : {}),
    responses,
  };
}

function parameterOf(field: DescField, where: "path" | "query", required: boolean, registry: SchemaRegistry): JsonObject {
  const { description, ...schema } = registry.fieldSchema(field);
  return { name: field.name, in: where, required, ...(description !== undefined ? { description } : {}), schema };
}

/** The fields a query string can set: what neither the path nor the body binds, scalars, enums and times only (request-json.ts). */
function queryFields(route: RestRoute): DescField[] {
  if (route.body === "*") return [];
  return route.method.input.fields.filter(
    (f) =>
      !route.paramNames.includes(f.name) &&
      f.name !== route.body &&
      (f.fieldKind === "scalar" || f.fieldKind === "enum" || (f.fieldKind === "list" && f.listKind !== "message") || isTimestamp(f)),
  );
}

/** The body is optional: an empty body leaves every field unset. */
function requestBodyOf(route: RestRoute, registry: SchemaRegistry): JsonObject | undefined {
  if (route.body === "") return undefined;
  const input = route.method.input;
  let schema: JsonObject;
  if (route.body !== "*") {
    schema = registry.fieldSchema(fieldOf(input, route.body));
  } else if (route.paramNames.length === 0) {
    schema = registry.refOf(input);
  } else {
    // The path binds some fields: the body holds the others.
    const properties = Object.fromEntries(
      input.fields.filter((f) => !route.paramNames.includes(f.name)).map((f) => [f.name, registry.fieldSchema(f)]),
    );
    schema = { type: "object", properties, additionalProperties: false };
  }
  return { required: false, content: { "application/json": { schema } } };
}

function bodyMessages(route: RestRoute): DescMessage[] {
  if (route.body === "") return [];
  if (route.body === "*") return [route.method.input];
  const field = fieldOf(route.method.input, route.body);
  return field.fieldKind === "message" ? [field.message] : [];
}

/** The messages a request body holds, at any depth (not the bodies themselves): a request may omit any of their fields. */
function partsOf(bodies: readonly DescMessage[]): Set<string> {
  const parts = new Set<string>();
  const visit = (message: DescMessage) => {
    for (const field of message.fields) {
      const nested = field.fieldKind === "message" || (field.fieldKind === "list" && field.listKind === "message") ? field.message : undefined;
      if (!nested || parts.has(nested.typeName) || nested.file.name.startsWith("google/protobuf/")) continue;
      parts.add(nested.typeName);
      visit(nested);
    }
  };
  bodies.forEach(visit);
  return parts;
}

function fieldOf(message: DescMessage, name: string): DescField {
  const field = message.fields.find((f) => f.name === name);
  if (!field) throw new Error(`${message.typeName} has no field '${name}'`);
  return field;
}

/** The router tries the most literal routes first; the document lists them as the protos do. */
function inProtoOrder(services: readonly DescService[], routes: RestRoute[]): RestRoute[] {
  const order = new Map<DescMethod, number>(services.flatMap((s) => s.methods).map((m, i) => [m, i]));
  return [...routes].sort((a, b) => order.get(a.method)! - order.get(b.method)!);
}

function checkHintsNameRealThings(services: readonly DescService[], hints: ApiHints): void {
  const known = new Set<string>();
  const visit = (message: DescMessage) => {
    if (known.has(message.typeName)) return;
    known.add(message.typeName);
    for (const field of message.fields) {
      known.add(`${message.typeName}.${field.name}`);
      if (field.message) visit(field.message);
    }
  };
  for (const service of services) {
    for (const method of service.methods) {
      known.add(`${service.typeName}.${method.name}`);
      visit(method.input);
      visit(method.output);
    }
  }
  const names = [...Object.keys(hints.fields ?? {}), ...(hints.requiredParams ?? []), ...Object.keys(hints.errors ?? {})];
  const unknown = names.filter((n) => !known.has(n));
  if (unknown.length > 0) throw new Error(`API hints name nothing in the descriptors: ${unknown.join(", ")}`);
}

function firstSentence(text: string): string {
  const match = /^(.+?[.;:])(\s|$)/s.exec(text);
  return (match?.[1] ?? text).replace(/[;:]$/, ".").replace(/\s+/g, " ");
}
