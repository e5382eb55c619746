import type { ServerResponse } from "node:http";
import type { JsonValue } from "@bufbuild/protobuf";
import type { ConnectNodeAdapterOptions } from "@connectrpc/connect-node";

// The Node request and response every handler of server/ takes (HTTP/1.1 or HTTP/2), and the one
// way they answer JSON. The bottom of server/: it imports nothing of its own folder.

type NodeHandlerFn = NonNullable<ConnectNodeAdapterOptions["fallback"]>;
export type NodeRequest = Parameters<NodeHandlerFn>[0];
export type NodeResponse = Parameters<NodeHandlerFn>[1];
export type NodeHandler = (req: NodeRequest, res: NodeResponse) => void;

export function sendJson(
  res: NodeResponse,
  status: number,
  body: JsonValue,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.writableEnded) return;
  const payload = JSON.stringify(body);
  (res as ServerResponse).writeHead(status, {
    ...headers,
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(payload),
  });
  res.end(payload);
}
