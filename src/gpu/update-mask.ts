import type { FieldMask } from "@bufbuild/protobuf/wkt";
import { excerpt, InvalidInputError } from "../errors.js";

// A PATCH's fields (SPEC.md section 2): those its update_mask names, or without one those set. A
// field set but left out of the mask is refused, never dropped unseen. REST fills the mask from
// the body's keys, so that `{"field": null}` names a field without setting it (clears it).

/**
 * The fields a PATCH changes, of `fields` (their snake_case names; `jsonNames` maps the mask's
 * camelCase paths to them); 400 naming the field for a path that cannot be changed, or a field
 * set but not named.
 */
export function namedFields<F extends string>(
  mask: FieldMask | undefined,
  fields: readonly F[],
  jsonNames: Readonly<Record<string, F>>,
  isSet: (field: F) => boolean,
): Set<F> {
  const paths = mask?.paths ?? [];
  if (paths.length === 0) return new Set(fields.filter(isSet));
  const named = new Set<F>();
  for (const path of paths) {
    const field = (fields as readonly string[]).includes(path) ? (path as F) : jsonNames[path];
    if (!field) {
      throw new InvalidInputError(`update_mask names '${excerpt(path)}', which cannot be changed; fields: ${fields.join(", ")}`, { extra: { field: "update_mask" } });
    }
    named.add(field);
  }
  for (const field of fields) {
    if (isSet(field) && !named.has(field)) throw new InvalidInputError(`${field} is set but update_mask does not name it`, { extra: { field } });
  }
  return named;
}
