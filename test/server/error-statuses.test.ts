import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { UnavailableError } from "../../src/errors.js";
import { toDomainError } from "../../src/indexing/indexing-service.js";
import { IndexingError } from "../../src/indexing/indexing-error.js";
import { toConnectError } from "../../src/server/error-interceptor.js";
import { httpStatusOf } from "../../src/server/rest/rest-handler.js";

// Every error class the service defines answers a status chosen for it: the list is read from the
// source (a class that descends from Error, in any file of src/), so that a class added tomorrow
// fails here until it is given its status. Statuses go by kind: a subclass answers as the class it
// is a kind of (a market's blocked error and an unknown outcome are kinds of unavailable: 503).
// The dashboard's browser code (src/**/*.js) throws nothing at the service and is not read.

const root = join(import.meta.dirname, "../..");
const silent = pino({ level: "silent" });

/** What a caller sees for each class: its HTTP status, or, for a class its module keeps to itself, where it is caught. */
type Expected = { status: number } | { caughtIn: string; why: string };

const EXPECTED: Record<string, Expected> = {
  DomainError: { status: 500 }, // abstract: a kind of its own or nothing
  InvalidInputError: { status: 400 },
  NotFoundError: { status: 404 },
  ConflictError: { status: 409 },
  ResourceExhaustedError: { status: 429 },
  UnavailableError: { status: 503 },
  OutcomeUnknownError: { status: 503 },
  MarketBlockedError: { status: 503 },
  OperationFailedError: { status: 500 },
  IndexingError: { status: 500 }, // as the indexing service hands it on; an unreachable dependency: 503 (below)
  LoadStepError: { status: 500 },
  MalformedItemError: { status: 500 },
  ConfigError: { status: 500 },
  EmbeddedPostgresError: { status: 500 },
  LeadLost: { status: 500 },
  PayloadTooLargeError: { caughtIn: "src/server/rest/rest-handler.ts", why: "answered 413 by the REST handler" },
  EndpointChanged: { caughtIn: "src/gpu/endpoints/control/endpoint-controller.ts", why: "ends a control round's action quietly" },
  GiveUp: { caughtIn: "src/server/prefix-index/raw-prompt.ts", why: "the raw body's reader gives up, and the body is parsed" },
};

interface DeclaredClass {
  name: string;
  base: string;
  file: string;
  exported: boolean;
}

const BUILTIN_ERRORS = ["Error", "TypeError", "RangeError", "SyntaxError", "ReferenceError", "AggregateError"];
const CLASS = /^(export\s+)?(?:abstract\s+)?class\s+(\w+)(?:<[^>]*>)?\s+extends\s+([\w.]+)/gm;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

/** The classes of src/ that descend from Error (through each other or a library's error class). */
function errorClassesOfSource(): DeclaredClass[] {
  const declared = sourceFiles(join(root, "src")).flatMap((path) =>
    [...readFileSync(path, "utf8").matchAll(CLASS)].map((m) => ({ name: m[2]!, base: m[3]!, file: relative(root, path), exported: m[1] !== undefined })),
  );
  const errors = new Set(BUILTIN_ERRORS);
  const isError = (base: string) => errors.has(base) || /(^|\.)\w*Error$/.test(base);
  for (let grew = true; grew; ) {
    grew = false;
    for (const c of declared) {
      if (!errors.has(c.name) && isError(c.base)) {
        errors.add(c.name);
        grew = true;
      }
    }
  }
  return declared.filter((c) => errors.has(c.name));
}

/** The status a caller gets for an error thrown below the service layer (the indexing service translates its own first). */
function statusOf(err: unknown): number {
  return httpStatusOf(toConnectError(toDomainError(err), silent, "probe").code);
}

describe("every error class of src/", () => {
  const classes = errorClassesOfSource();

  it("is found in the source, and has its expected status (a new class is given one here)", () => {
    expect(classes.length).toBeGreaterThanOrEqual(15);
    expect(classes.map((c) => c.name).sort()).toEqual(Object.keys(EXPECTED).sort());
  });

  it.each(errorClassesOfSource().map((c) => [c.name, c] as const))("%s answers its status", async (name, declared) => {
    const expected = EXPECTED[name]!;
    if ("caughtIn" in expected) {
      // Not exported, so nothing outside its file can throw it on; its file catches it.
      expect(declared.exported).toBe(false);
      expect(declared.file).toBe(expected.caughtIn);
      expect(readFileSync(join(root, declared.file), "utf8")).toMatch(new RegExp(`instanceof ${name}\\b`));
      return;
    }
    const module = (await import(pathToFileURL(join(root, declared.file)).href)) as Record<string, new (message: string) => Error>;
    const ErrorClass = module[name];
    expect(ErrorClass, `${name} is exported by ${declared.file}`).toBeTypeOf("function");
    expect(statusOf(new ErrorClass!("probe"))).toBe(expected.status);
  });
});

describe("statuses by kind", () => {
  it("answers a subclass as its nearest mapped class: a kind of unavailable is a 503", () => {
    class SomeMarketOutage extends UnavailableError {}
    class ItsNarrowerCase extends SomeMarketOutage {}
    expect(statusOf(new ItsNarrowerCase("a market is down"))).toBe(503);
  });

  it("answers an indexing run's unreachable dependency 503, its other failures 500", () => {
    expect(statusOf(new IndexingError("BULK_FAILED", "Elasticsearch did not answer", { unavailable: true }))).toBe(503);
    expect(statusOf(new IndexingError("BULK_FAILED", "a document was refused"))).toBe(500);
  });
});
