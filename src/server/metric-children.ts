// prom-client hashes a sample's labels on every call (their names sorted and joined). A path that
// counts every request keeps each label set's child instead, found by its values in order. The
// sets are few (endpoint names, routes, methods, statuses), so the children are never dropped.

/** `labels(...values)` of a prom-client metric, each label set's child made once. */
export function keptChildren<Child>(labels: (...values: string[]) => Child): (...values: string[]) => Child {
  const children = new Map<string, Child>();
  return (...values) => {
    const key = values.length === 1 ? values[0]! : values.join("\u0000");
    let child = children.get(key);
    if (child === undefined) {
      child = labels(...values);
      children.set(key, child);
    }
    return child;
  };
}
