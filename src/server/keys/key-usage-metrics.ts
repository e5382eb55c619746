import { Counter, type Registry } from "prom-client";
import type { SettledAnswer } from "../proxy/endpoint-proxy.js";

// Per caller (a key's or a static token's name) and endpoint: its answers by status and the
// tokens they used (SPEC.md section 2, "Keys for callers", Records). Label values are bounded:
// endpoints and callers are the service's own names, never a caller's input.

/** The per-key counters, fed by the proxy's settle step. */
export function createKeyUsageMetrics(registry: Registry): (answer: SettledAnswer) => void {
  const requests = new Counter({
    name: "gpu_endpoint_key_requests_total",
    help: "Answers through the endpoint proxy by endpoint, caller (key or token name) and the HTTP status the caller got",
    labelNames: ["endpoint", "key", "code"],
    registers: [registry],
  });
  const tokens = new Counter({
    name: "gpu_endpoint_key_tokens_total",
    help: "Tokens of the answers through the endpoint proxy by endpoint, caller (key or token name) and kind (prompt, completion); estimated where the replica counted none",
    labelNames: ["endpoint", "key", "kind"],
    registers: [registry],
  });
  return ({ endpoint, caller, status, usage }) => {
    requests.inc({ endpoint, key: caller, code: String(status) });
    if (usage.promptTokens > 0) tokens.inc({ endpoint, key: caller, kind: "prompt" }, usage.promptTokens);
    if (usage.completionTokens > 0) tokens.inc({ endpoint, key: caller, kind: "completion" }, usage.completionTokens);
  };
}
