import type { MarketInstance } from "../marketplace/port.js";
import { LLM_PORT } from "../creation/templates.js";

// Is the model server answering? A real HTTP call: GET /health, and when that does not answer
// 2xx, GET /v1/models (servers that have no /health still list their models). Each call has a
// short timeout so that a hung server cannot hold a status read.

export type ModelServerProbe = (baseUrl: string) => Promise<boolean>;

export function createModelServerProbe(timeoutMs: number): ModelServerProbe {
  const answers = async (url: string): Promise<boolean> => {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false;
    }
  };
  return async (baseUrl) => (await answers(`${baseUrl}/health`)) || (await answers(`${baseUrl}/v1/models`));
}

/** Public host port of the model server: the mapping of its container port, else the port itself. */
export function modelServerPort(portMappings: Record<string, number>, containerPort = LLM_PORT): number {
  return portMappings[`${containerPort}/tcp`] ?? containerPort;
}

/**
 * Where the model server of a marketplace instance answers, or undefined while it has no address
 * or no published port (nothing to probe yet).
 */
export function modelServerUrl(instance: Pick<MarketInstance, "publicIp" | "portMappings">): string | undefined {
  const port = instance.portMappings[`${LLM_PORT}/tcp`];
  if (!instance.publicIp || port === undefined) return undefined;
  const host = instance.publicIp.includes(":") ? `[${instance.publicIp}]` : instance.publicIp;
  return `http://${host}:${port}`;
}
