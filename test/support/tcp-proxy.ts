import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy on loopback in front of a real server (Elasticsearch), for fault injection.
 * `sever()` cuts every open connection and refuses new ones, as a network partition would;
 * `restore()` lets connections through again. `severNext()` cuts only the connection that carries
 * the next request, as a single network failure would. `bytesUp` counts the bytes sent towards the
 * server, so a test can wait for traffic (`whenBytesUp`) instead of sleeping.
 */
export interface TcpProxy {
  readonly url: string;
  readonly bytesUp: number;
  readonly severed: boolean;
  /** Connections cut by `severNext()` so far. */
  readonly severedNext: number;
  /** Resolves once at least `bytes` have been forwarded towards the server. */
  whenBytesUp(bytes: number): Promise<void>;
  sever(): void;
  /** Cuts the connection that carries the next request; later connections pass. */
  severNext(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: string): Promise<TcpProxy> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const waiters: Array<{ bytes: number; resolve: () => void }> = [];
  let severed = false;
  let armed = false;
  let severedNext = 0;
  let bytesUp = 0;

  const countUp = (n: number) => {
    bytesUp += n;
    for (const waiter of waiters.filter((w) => w.bytes <= bytesUp)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve();
    }
  };
  const server: Server = createServer((client) => {
    // While severed a connection is accepted and dropped at once: the caller sees a reset.
    if (severed) return void client.destroy();
    const upstream = connect(Number(port), hostname);
    sockets.add(client).add(upstream);
    client.on("data", (chunk: Buffer) => {
      if (armed) {
        // The request never reaches the server: its chunk is dropped with the connection.
        armed = false;
        severedNext++;
        client.destroy();
        upstream.destroy();
        return;
      }
      countUp(chunk.length);
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => client.write(chunk));
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address() as { port: number };

  return {
    url: `http://127.0.0.1:${address.port}`,
    get bytesUp() {
      return bytesUp;
    },
    get severed() {
      return severed;
    },
    get severedNext() {
      return severedNext;
    },
    whenBytesUp(bytes) {
      if (bytesUp >= bytes) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ bytes, resolve }));
    },
    sever() {
      severed = true;
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
    severNext() {
      armed = true;
    },
    restore() {
      severed = false;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
