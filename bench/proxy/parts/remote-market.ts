// bench:keys's marketplace: the remote marketplace's wire contract (docs/marketplace-api.md), just
// enough of it for the real service (MARKETPLACE=remote) to rent machines whose model server is
// one bench replica. The catalogue is the simulated marketplace's; every instance runs at once and
// maps its model port to the replica's port, so that the service routes its endpoint's requests to
// a replica in a process of its own (sse-replica.ts) and the service process's CPU is the proxy's.
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createCatalogue } from "../../../src/gpu/marketplace/simulated/catalogue.js";

export const MARKET_KEY = "bench-market-key";

export interface RemoteMarket {
  url: string;
  close(): Promise<void>;
}

interface Instance {
  id: string;
  offer_id: string;
  label: string;
  status: "running";
  public_ip: string;
  ssh_port: number;
  port_mappings: Record<string, number>;
  gpu_name: string;
  num_gpus: number;
  gpu_ram: number;
  dph_total: number;
}

export async function startRemoteMarket(replicaPort: number): Promise<RemoteMarket> {
  const offers = createCatalogue().map((o) => ({
    id: o.id,
    gpu_name: o.gpuName,
    num_gpus: o.numGpus,
    gpu_ram: o.gpuRam,
    dph_total: o.dphTotal,
    rentable: o.rentable,
    location: o.location,
    direct_port_count: o.directPortCount,
    cuda_max_good: o.cudaMaxGood,
    reliability: o.reliability,
  }));
  const instances = new Map<string, Instance>();
  const byLabel = new Map<string, Instance>();
  let nextId = 9_100_001;
  const send = (res: ServerResponse, status: number, body: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
  const notFound = (res: ServerResponse, code: string) => send(res, 404, { error: { code, message: code } });

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.once("end", () => {
      if (req.headers.authorization !== `Bearer ${MARKET_KEY}`) return send(res, 401, { error: { code: "unauthorized", message: "unknown key" } });
      const url = new URL(req.url ?? "/", "http://market");
      const id = /^\/v1\/instances\/([^/]+)$/.exec(url.pathname)?.[1];
      if (req.method === "GET" && url.pathname === "/v1/offers") return send(res, 200, { offers });
      if (req.method === "GET" && url.pathname === "/v1/instances") {
        const prefix = url.searchParams.get("label_prefix") ?? "";
        return send(res, 200, { instances: [...instances.values()].filter((i) => i.label.startsWith(prefix)) });
      }
      if (req.method === "POST" && url.pathname === "/v1/instances") {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { offer_id: string; label: string; llm_port?: number };
        const replayed = byLabel.get(body.label);
        if (replayed) return res.writeHead(200, { "content-type": "application/json", "idempotent-replayed": "true" }).end(JSON.stringify({ instance: replayed }));
        const offer = offers.find((o) => o.id === body.offer_id);
        if (!offer) return notFound(res, "offer_not_found");
        const instance: Instance = {
          id: String(nextId++),
          offer_id: offer.id,
          label: body.label,
          status: "running",
          public_ip: "127.0.0.1",
          ssh_port: 22,
          port_mappings: { "22/tcp": 22, [`${body.llm_port ?? 8000}/tcp`]: replicaPort },
          gpu_name: offer.gpu_name,
          num_gpus: offer.num_gpus,
          gpu_ram: offer.gpu_ram,
          dph_total: offer.dph_total,
        };
        instances.set(instance.id, instance);
        byLabel.set(instance.label, instance);
        return send(res, 201, { instance });
      }
      const instance = id === undefined ? undefined : instances.get(decodeURIComponent(id));
      if (id !== undefined && !instance) return notFound(res, "instance_not_found");
      if (instance && req.method === "GET") return send(res, 200, { instance });
      if (instance && req.method === "DELETE") {
        instances.delete(instance.id);
        return send(res, 200, { id: instance.id, status: "destroyed" });
      }
      notFound(res, "not_found");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
