import { OperationFailedError } from "../../../errors.js";

// Reads a marketplace's JSON answer field by field. A value of the wrong shape is a malformed
// answer (500), named by its path in the answer, never a crash further down.

export type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The readers for the answers of one marketplace, `who` naming it in errors. */
export function jsonReader(who: string) {
  const malformed = (where: string, expected: string): never => {
    throw new OperationFailedError(`${who} sent a malformed answer: ${where} is not ${expected}`);
  };
  return {
    malformed,
    object: (value: unknown, where: string): Json => (isObject(value) ? value : malformed(where, "an object")),
    array: (value: unknown, where: string): unknown[] => (Array.isArray(value) ? value : malformed(where, "an array")),
    string: (value: unknown, where: string): string => (typeof value === "string" ? value : malformed(where, "a string")),
    number: (value: unknown, where: string): number =>
      typeof value === "number" && Number.isFinite(value) ? value : malformed(where, "a number"),
    integer: (value: unknown, where: string): number => (Number.isInteger(value) ? (value as number) : malformed(where, "an integer")),
    boolean: (value: unknown, where: string): boolean => (typeof value === "boolean" ? value : malformed(where, "a boolean")),
    /** A field the marketplace may leave out or null: undefined then, else read as `read` says. */
    optional: <T>(read: (value: unknown, where: string) => T, value: unknown, where: string): T | undefined =>
      value === undefined || value === null ? undefined : read(value, where),
  };
}
