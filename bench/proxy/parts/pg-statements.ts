// bench:keys's count of the statements a service sends PostgreSQL: a loopback TCP relay in front of
// the server, which the service reaches through its DATABASE_URL, reading the frontend protocol as
// it passes. A statement is a simple query ('Q') or an extended-protocol Execute ('E'), named by
// the text of the query it runs (the 'Q' itself, or the last Parse 'P' of its connection): begin,
// commit and rollback are statements too. Nothing is changed on the way.
import { createServer, connect, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";

/** Statements by kind: what the statement's text is recognised as (KINDS), else "other". */
export type StatementCounts = Record<string, number>;

/** The statements of the keys' machinery, by a phrase of their text; the first that matches names it. */
const KINDS: Array<[kind: string, phrase: string]> = [
  ["lease renewal (gpu_key_lease_renew)", "gpu_key_lease_renew("],
  ["key directory poll (gpu_keys stamp)", "from gpu_keys)"],
  ["usage minutes (gpu_key_usage_minutes)", "gpu_key_usage_minutes"],
];

export interface StatementCounter {
  /** The URL to give the service: `databaseUrl` with its host and port replaced by the relay's. */
  url: string;
  /** What was counted so far (a copy). */
  counts(): StatementCounts;
  close(): Promise<void>;
}

export async function startStatementCounter(databaseUrl: string): Promise<StatementCounter> {
  const target = new URL(databaseUrl);
  const counts: StatementCounts = {};
  const sockets = new Set<Socket>();
  const count = (text: string) => {
    const kind = KINDS.find(([, phrase]) => text.includes(phrase))?.[0] ?? "other";
    counts[kind] = (counts[kind] ?? 0) + 1;
  };
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
      socket.once("error", () => (socket === client ? upstream : client).destroy());
    }
    client.once("close", () => upstream.destroy());
    upstream.once("close", () => client.destroy());
    const reader = frontendReader(count);
    client.on("data", (chunk: Buffer) => {
      reader(chunk);
      upstream.write(chunk);
    });
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = new URL(databaseUrl);
  url.hostname = "127.0.0.1";
  url.port = String((server.address() as AddressInfo).port);
  return {
    url: url.toString(),
    counts: () => ({ ...counts }),
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Reads a client's messages as they arrive in chunks: the untyped startup message, then typed ones. */
function frontendReader(count: (text: string) => void): (chunk: Buffer) => void {
  let pending: Buffer = Buffer.alloc(0);
  let started = false;
  let parsed = "";
  return (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (;;) {
      const headerLength = started ? 5 : 4;
      if (pending.length < headerLength) return;
      const length = pending.readUInt32BE(started ? 1 : 0);
      const total = started ? 1 + length : length;
      if (pending.length < total) return;
      if (!started) {
        // An SSLRequest or GSSENCRequest is answered before the startup message proper; the relay passes it on.
        const code = pending.readUInt32BE(4);
        if (code !== 80877103 && code !== 80877104) started = true;
      } else {
        const type = String.fromCharCode(pending[0]!);
        if (type === "Q") count(cString(pending, 5));
        else if (type === "P") parsed = cString(pending, 5 + cString(pending, 5).length + 1);
        else if (type === "E") count(parsed);
      }
      pending = pending.subarray(total);
    }
  };
}

/** The NUL-terminated string at `at`. */
function cString(buffer: Buffer, at: number): string {
  const end = buffer.indexOf(0, at);
  return buffer.toString("utf8", at, end < 0 ? buffer.length : end);
}
