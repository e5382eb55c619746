import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { importCircles, importGraph } from "../support/import-graph.js";

// bench/ has rooms by what the benches measure (proxy/, routing/, serving/, indexing/, service/): a room's
// entry points (the npm scripts) at its top, the parts only they use one level down in its parts/,
// and what every room uses in shared/. See docs/architecture.md.

const root = join(import.meta.dirname, "../..");
const ROOM_ENTRY = /^bench\/(proxy|routing|serving|indexing|service)\/[a-z-]+\.ts$/;
const PART = /^bench\/((proxy|routing|serving|indexing|service)\/parts|shared)\/[a-z-]+\.ts$/;

describe("the imports of bench/", () => {
  const graph = importGraph(root, "bench");

  it("are read from every file", () => {
    expect(graph.get("bench/proxy/proxy.ts")).toContain("bench/proxy/parts/processes.ts");
  });

  it("form no circle", () => {
    expect(importCircles(graph)).toEqual([]);
  });

  it("go from entry points to parts: a room's files import only its parts and the shared ones", () => {
    const wrong = [...graph].flatMap(([file, targets]) => {
      const room = file.split("/")[1];
      const allowed = room === "shared" ? ["bench/shared/"] : [`bench/${room}/parts/`, "bench/shared/"];
      return targets.filter((t) => !allowed.some((prefix) => t.startsWith(prefix))).map((t) => `${file} -> ${t}`);
    });
    expect(wrong).toEqual([]);
  });

  it("every file is an entry point at a room's top or a part one level down", () => {
    expect([...graph.keys()].filter((file) => !ROOM_ENTRY.test(file) && !PART.test(file))).toEqual([]);
  });

  it("every bench script runs an entry point at a room's top", () => {
    const scripts = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts;
    const benches = Object.entries(scripts).filter(([name]) => name.startsWith("bench:"));
    expect(benches.length).toBeGreaterThan(8);
    for (const [name, command] of benches) {
      const file = /^tsx (bench\/\S+\.ts)$/.exec(command)?.[1];
      expect(file, name).toMatch(ROOM_ENTRY);
      expect(graph.has(file!), name).toBe(true);
    }
  });
});
