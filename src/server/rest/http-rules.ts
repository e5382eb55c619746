import { getOption, hasOption, type DescMethodUnary, type DescService } from "@bufbuild/protobuf";
import { http } from "../../../gen/google/api/annotations_pb.js";

/** One REST route, derived from the google.api.http annotation of an RPC. */
export interface RestRoute {
  readonly verb: string;
  readonly pattern: string;
  readonly method: DescMethodUnary;
  /** "" (no body), "*" (the whole request message) or the name of the field the body binds to. */
  readonly body: string;
  readonly paramNames: readonly string[];
  readonly regex: RegExp;
  /** Literal segments count; more literal routes are tried first. */
  readonly literalSegments: number;
}

/**
 * Reads the google.api.http annotation of every RPC of the given services. Adding an annotated
 * RPC to a proto file is all it takes to get its REST route. Fails fast on patterns this
 * transcoder does not support, rather than serving them wrong.
 */
export function restRoutesOf(services: readonly DescService[]): RestRoute[] {
  const routes: RestRoute[] = [];
  for (const service of services) {
    for (const method of service.methods) {
      if (!hasOption(method, http)) continue;
      if (method.methodKind !== "unary") {
        throw new Error(`${method.parent.typeName}.${method.name}: only unary RPCs can have a REST route`);
      }
      const rule = getOption(method, http);
      if (rule.pattern.case === undefined || rule.pattern.case === "custom") {
        throw new Error(`${method.parent.typeName}.${method.name}: unsupported google.api.http pattern`);
      }
      routes.push(compileRoute(rule.pattern.case.toUpperCase(), rule.pattern.value, rule.body, method as DescMethodUnary));
    }
  }
  return routes.sort((a, b) => b.literalSegments - a.literalSegments);
}

function compileRoute(verb: string, pattern: string, body: string, method: DescMethodUnary): RestRoute {
  const paramNames: string[] = [];
  let literalSegments = 0;
  const parts = pattern.split("/").map((segment) => {
    const variable = /^\{([a-z_][a-z0-9_]*)\}$/.exec(segment);
    if (variable?.[1] !== undefined) {
      const field = method.input.fields.find((f) => f.name === variable[1]);
      if (field?.fieldKind !== "scalar") {
        throw new Error(`${method.name}: path variable '${variable[1]}' must name a scalar field`);
      }
      paramNames.push(variable[1]);
      return "([^/]+)";
    }
    if (/[{}*:]/.test(segment)) {
      throw new Error(`${method.name}: unsupported path segment '${segment}' in ${pattern}`);
    }
    literalSegments++;
    return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  });
  return {
    verb,
    pattern,
    method,
    body,
    paramNames,
    regex: new RegExp(`^${parts.join("/")}/?$`),
    literalSegments,
  };
}

export interface RouteMatch {
  route: RestRoute;
  /** Raw (still percent-encoded) path parameters by field name. */
  params: Record<string, string>;
}

/** Finds the route for a request; `allowed` lists the verbs of the path when only the verb is wrong. */
export function matchRoute(
  routes: readonly RestRoute[],
  verb: string,
  path: string,
): { match?: RouteMatch; allowed: string[] } {
  const allowed: string[] = [];
  for (const route of routes) {
    const found = route.regex.exec(path);
    if (!found) continue;
    if (route.verb !== verb) {
      allowed.push(route.verb);
      continue;
    }
    const params: Record<string, string> = {};
    route.paramNames.forEach((name, i) => {
      params[name] = found[i + 1] ?? "";
    });
    return { match: { route, params }, allowed };
  }
  return { allowed };
}
