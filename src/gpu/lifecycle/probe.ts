import type { MarketInstance } from "../marketplace/port.js";
import { LLM_PORT } from "../creation/templates.js";

// Is the model server serving? A real HTTP call with a short timeout, so that a hung server
// cannot hold a status read.
// - With a key (every model server created since keys): GET /v1/models with the key as a bearer
//   token must answer 2xx. /health proves nothing here: vLLM answers it to anyone, key or not, so
//   a server started without our key, or with another one, would pass for ours.
// - Without a key (instances created before keys): GET /health, and when that does not answer
//   2xx, GET /v1/models (servers that have no /health still list their models).

export type ModelServerProbe = (baseUrl: string, apiKey?: string | null) => Promise<boolean>;

export function createModelServerProbe(timeoutMs: number): ModelServerProbe {
  const answers = async (url: string, apiKey?: string | null): Promise<boolean> => {
    try {
      const headers: Record<string, string> = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
      const res = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false;
    }
  };
  return async (baseUrl, apiKey) => {
    if (apiKey) return answers(`${baseUrl}/v1/models`, apiKey);
    return (await answers(`${baseUrl}/health`)) || (await answers(`${baseUrl}/v1/models`));
  };
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
