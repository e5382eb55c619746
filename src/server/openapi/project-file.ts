import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// Files the service reads at start-up that live in the project, not in its code: package.json and
// the descriptor set under gen/. The code runs from src/ (tsx) or from the build in dist/src/, so
// they are found from the project root (the nearest directory up with a package.json) rather than
// by a fixed number of "../".

const ROOT = findRoot(dirname(fileURLToPath(import.meta.url)));

/** The absolute path of a file given relative to the project root, e.g. "gen/proto-descriptors.binpb". */
export function projectFile(relativePath: string): string {
  return join(ROOT, relativePath);
}

function findRoot(from: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${from}`);
  }
}
