// Is a replica ready to serve its model? A real HTTP call, `GET /v1/models`, that must answer
// 2xx and list the model (a server that is up but still loading, or serving another model, is
// not ready). The replica's own model-server key is sent when it has one. A short timeout keeps a
// hung server from holding the controller's round.

export type ReadinessProbe = (baseUrl: string, model: string, apiKey: string | null) => Promise<boolean>;

export function createReadinessProbe(timeoutMs: number): ReadinessProbe {
  return async (baseUrl, model, apiKey) => {
    try {
      const res = await fetch(`${baseUrl}/v1/models`, {
        headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
        signal: AbortSignal.timeout(timeoutMs),
      });
      if (!res.ok) {
        await res.body?.cancel();
        return false;
      }
      return listsModel(await res.json(), model);
    } catch {
      return false;
    }
  };
}

/** OpenAI's model list: {"data": [{"id": "<model>"}, ...]}. */
function listsModel(body: unknown, model: string): boolean {
  const data = (body as { data?: unknown } | null)?.data;
  return Array.isArray(data) && data.some((entry) => (entry as { id?: unknown } | null)?.id === model);
}
