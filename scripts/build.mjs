// npm run build: compiles the service (tsc -p tsconfig.build.json, with any options given, such as
// --outDir) and puts the dashboard's page files beside their handler in the output, where it
// serves them from (they are plain browser modules: nothing to compile).
import { execFileSync } from "node:child_process";
import { cpSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const args = process.argv.slice(2);
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json", ...args], { stdio: "inherit" });
const at = args.indexOf("--outDir");
const outDir = at >= 0 ? args[at + 1] : "dist";
cpSync("src/server/dashboard/assets", join(outDir, "src/server/dashboard/assets"), { recursive: true });
