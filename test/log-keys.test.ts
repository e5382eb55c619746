import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

// Log lines use snake_case keys (SPEC.md section 4). Checked on the types, not the text: every
// object handed to a pino method in src/ (a log call or a child logger's bindings), spreads
// included, must have snake_case keys only.

const ROOT = join(import.meta.dirname, "..");
const SNAKE_CASE = /^[a-z][a-z0-9]*(_[a-z0-9]+)*$/;

function logKeysIn(): Array<{ where: string; key: string }> {
  const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, "tsconfig.json"), {}, ts.sys as unknown as ts.ParseConfigFileHost)!;
  const sources = config.fileNames.filter((f) => f.startsWith(join(ROOT, "src")));
  const program = ts.createProgram(sources, config.options);
  const checker = program.getTypeChecker();
  const found: Array<{ where: string; key: string }> = [];
  for (const file of program.getSourceFiles().filter((f) => sources.includes(f.fileName))) {
    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression) && node.arguments.length > 0) {
        const declaration = checker.getSymbolAtLocation(node.expression.name)?.declarations?.[0];
        if (declaration?.getSourceFile().fileName.includes("/node_modules/pino/")) {
          const type = checker.getTypeAtLocation(node.arguments[0]!);
          if (type.flags & ts.TypeFlags.Object && !(type.flags & ts.TypeFlags.StringLike)) {
            const { line } = file.getLineAndCharacterOfPosition(node.getStart());
            const where = `${file.fileName.slice(ROOT.length + 1)}:${line + 1}`;
            for (const property of checker.getPropertiesOfType(type)) found.push({ where, key: property.name });
          }
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
  return found;
}

describe("log keys", () => {
  it("are snake_case in every log call and child logger of src/", () => {
    const keys = logKeysIn();
    // The check sees the calls it must see (a known line of each kind).
    expect(keys).toContainEqual({ where: expect.stringMatching(/^src\/main\.ts:/), key: "reason" });
    expect(keys).toContainEqual({ where: expect.stringMatching(/^src\/gpu\/gpu-module\.ts:/), key: "service" });
    expect(keys.filter((k) => !SNAKE_CASE.test(k.key))).toEqual([]);
  });
});
