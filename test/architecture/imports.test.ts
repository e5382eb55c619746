import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { importCircles, importGraph } from "../support/import-graph.js";

// The layout holds only if nothing imports its way back: a circle (type-only imports count) means
// two files cannot be read, tested or moved apart. See docs/architecture.md.

const root = join(import.meta.dirname, "../..");

/**
 * What a file may import from a folder above its own: the shared bottom layer of src/, and the
 * one or few files each folder keeps for its subfolders (its context, its port, its error type).
 */
const BOTTOM = [
  /^src\/(errors|logger|config|module|actor)\.ts$/,
  /^src\/db\//,
  /^src\/gpu\/(gpu-context|update-mask)\.ts$/, // what the GPU service's parts share, and a PATCH's update_mask
  /^src\/gpu\/marketplace\/(port|offer-filter|lost-create)\.ts$/, // the adapters' interface, their shared offer filter and lost-create policy
  /^src\/indexing\/(indexing-error|indexing-metrics|job-lock|kst-timestamp)\.ts$/,
  /^src\/server\/(node-http|service-registration|client-gone|counted-metrics)\.ts$/, // counted-metrics: the request metrics of the app and the proxy
];

describe("the imports of src/", () => {
  const graph = importGraph(root, "src");

  it("are read from every file (the check sees the arrows it must see)", () => {
    expect(graph.size).toBeGreaterThan(100);
    expect(graph.get("src/app.ts")).toContain("src/module.ts");
    expect(graph.get("src/gpu/gpu-module.ts")).toContain("src/module.ts");
  });

  it("form no circle", () => {
    expect(importCircles(graph)).toEqual([]);
  });

  it("point down the tree, or up only to a folder's shared bottom files", () => {
    const upward = [...graph].flatMap(([file, targets]) =>
      targets.filter((t) => dirname(file).startsWith(`${dirname(t)}/`) && !BOTTOM.some((b) => b.test(t))).map((t) => `${file} -> ${t}`),
    );
    expect(upward).toEqual([]);
  });

  it("a circle is found when there is one", () => {
    const circular = new Map([
      ["a.ts", ["b.ts"]],
      ["b.ts", ["c.ts"]],
      ["c.ts", ["a.ts", "d.ts"]],
      ["d.ts", []],
      ["e.ts", ["e.ts"]],
    ]);
    expect(importCircles(circular)).toEqual([["a.ts", "b.ts", "c.ts"], ["e.ts"]]);
  });
});
