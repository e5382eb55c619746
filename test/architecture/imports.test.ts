import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { importCircles, importGraph } from "../support/import-graph.js";

// The layout holds only if nothing imports its way back: a circle (type-only imports count) means
// two files cannot be read, tested or moved apart. See docs/architecture.md.

const root = join(import.meta.dirname, "../..");

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
