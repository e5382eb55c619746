import { readFileSync } from "node:fs";

/** One curl call of the README's examples, with the answer printed under it when there is one. */
export interface ReadmeExample {
  /** The command as written, for messages. */
  command: string;
  method: string;
  path: string;
  query: URLSearchParams;
  body?: unknown;
  response?: {
    status: number;
    body: unknown;
    /** The README elided fields with `...`: the shown fields must fit, absent ones are not a fault. */
    partial: boolean;
  };
}

/** A command line of the README's sh blocks, as written, with the answer shown under or after it. */
export interface ReadmeCommand {
  command: string;
  response?: ReadmeExample["response"];
}

/**
 * The commands of the README's sh blocks that start with one of `prefixes` (continuation lines
 * joined). An answer is a `# {...}` comment (one or more lines) under the command, or a
 * `# {...}` / `# 404 {...}` comment after it.
 */
export function readmeCommands(file: string, prefixes: readonly string[]): ReadmeCommand[] {
  const text = readFileSync(file, "utf8");
  const commands: ReadmeCommand[] = [];
  for (const block of text.matchAll(/```sh\n([\s\S]*?)```/g)) {
    const lines = block[1]!.replace(/\\\n\s*/g, " ").split("\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!;
      if (!prefixes.some((prefix) => line.startsWith(prefix))) continue;
      const [command, trailing] = splitComment(line);
      const answer: string[] = [];
      if (trailing !== undefined && /^(\d{3} )?\{/.test(trailing)) answer.push(trailing);
      else if (lines[i + 1]?.startsWith("# {")) {
        // The answer's first line, then its continuation lines (indented by one more space).
        answer.push(lines[++i]!.slice(2));
        while (lines[i + 1]?.startsWith("#  ")) answer.push(lines[++i]!.slice(3));
      }
      commands.push({ command, response: answer.length > 0 ? parseAnswer(answer.join(" ")) : undefined });
    }
  }
  return commands;
}

/** The curl examples of the README's sh blocks: `-X`, `-d '<json>'` and the URL are read. */
export function readmeExamples(file: string): ReadmeExample[] {
  return readmeCommands(file, ["curl "]).map(({ command, response }) => ({ ...parseCurl(command), response }));
}

/** The README's TypeScript blocks, as written. */
export function readmeTypeScript(file: string): string[] {
  return [...readFileSync(file, "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

function splitComment(line: string): [string, string | undefined] {
  const at = line.search(/\s#\s/);
  return at < 0 ? [line.trim(), undefined] : [line.slice(0, at).trim(), line.slice(at).replace(/^\s#\s/, "").trim()];
}

function parseCurl(command: string): Omit<ReadmeExample, "response"> {
  const method = /-X (\w+)/.exec(command)?.[1];
  const data = /-d '([^']*)'/.exec(command)?.[1];
  const url = /'?(localhost:\d+[^\s']*)'?/.exec(command)?.[1];
  if (url === undefined) throw new Error(`no URL in README example: ${command}`);
  const parsed = new URL(`http://${url}`);
  return {
    command,
    method: method ?? (data !== undefined ? "POST" : "GET"),
    path: parsed.pathname,
    query: parsed.searchParams,
    body: data !== undefined ? JSON.parse(data) : undefined,
  };
}

function parseAnswer(text: string): ReadmeExample["response"] {
  const status = /^(\d{3}) /.exec(text)?.[1];
  const json = status ? text.slice(4) : text;
  const partial = json.includes(",...");
  return { status: Number(status ?? 200), body: JSON.parse(json.replaceAll(",...", "")), partial };
}
