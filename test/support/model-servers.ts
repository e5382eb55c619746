import { afterAll, beforeAll } from "vitest";
import { startModelServer, type ModelServer } from "../../src/gpu/marketplace/simulated/model-server.js";

/**
 * Two simulated model servers of `model` on two instances ("m-17", "m-18"), writing their tokens at
 * once: the one an answer is cut on and the one that continues it. Started before the file's tests
 * and closed after them; read `first` and `second` inside tests.
 */
export function twoModelServers(model: string): { first: ModelServer; second: ModelServer } {
  const servers = {} as { first: ModelServer; second: ModelServer };
  beforeAll(async () => {
    servers.first = await startModelServer({ model, host: "127.0.0.1", instance: "m-17", tokenDelayMs: 0 });
    servers.second = await startModelServer({ model, host: "127.0.0.1", instance: "m-18", tokenDelayMs: 0 });
  });
  afterAll(async () => {
    await servers.first?.close();
    await servers.second?.close();
  });
  return servers;
}
