import { readFileSync } from "node:fs";
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

// RunPod's REST v2 contract, read from its published OpenAPI file (runpod-v2-openapi.json, kept
// beside this file as RunPod publishes it): the emulator checks every request body and query
// against it as RunPod does (unknown fields: 422, with one line per violation in `errors`), and
// every answer it sends, so that the adapter is never tested against answers RunPod cannot give.

const document = JSON.parse(readFileSync(new URL("./runpod-v2-openapi.json", import.meta.url), "utf8")) as Record<string, unknown>;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
ajv.addSchema(document, "runpod");

const validators = new Map<string, ValidateFunction>();

/** The schema of components/schemas/<name>, compiled once. */
function validator(pointer: string): ValidateFunction {
  let validate = validators.get(pointer);
  if (!validate) {
    validate = ajv.getSchema(`runpod#${pointer}`);
    if (!validate) throw new Error(`no schema at ${pointer} in RunPod's OpenAPI file`);
    validators.set(pointer, validate);
  }
  return validate;
}

/** The violations of `value` against components/schemas/<schema>, as RunPod words them ("$.gpu: ..."); empty when it conforms. */
export function violations(schema: string, value: unknown): string[] {
  const validate = validator(`/components/schemas/${schema}`);
  return validate(value) ? [] : (validate.errors ?? []).map(describe);
}

/** The violations of a query parameter's value against its declared schema (components/parameters/<name>). */
export function parameterViolations(parameter: string, value: unknown): string[] {
  const validate = validator(`/components/parameters/${parameter}/schema`);
  return validate(value) ? [] : (validate.errors ?? []).map((e) => `${parameter}: ${e.message ?? "invalid"}`);
}

function describe(error: ErrorObject): string {
  const where = `$${error.instancePath.replace(/\//g, ".")}`;
  if (error.keyword === "unevaluatedProperties" || error.keyword === "additionalProperties") {
    const name = (error.params as { unevaluatedProperty?: string; additionalProperty?: string }).unevaluatedProperty ?? (error.params as { additionalProperty?: string }).additionalProperty;
    return `${where}: additional properties '${name}' not allowed`;
  }
  return `${where}: ${error.message ?? "invalid"}`;
}
