import type { Scope } from "./scopes.js";

// The one table of who may call what: every RPC of every registered service (by its service type
// name and method name, as in the proto) and every non-RPC HTTP route but the health checks.
// REST routes are RPCs (their google.api.http annotations), so they take their RPC's scope.
// test/server/auth/scope-table.test.ts fails for a registered RPC missing here, and the auth
// interceptor refuses such an RPC to every token (fail closed).

export const RPC_SCOPES: Readonly<Record<string, Readonly<Record<string, Scope>>>> = {
  "gpu.v1.GpuService": {
    ListOffers: "gpu:read",
    SearchOffers: "gpu:read",
    ListTemplates: "gpu:read",
    GetTemplate: "gpu:read",
    CreateInstanceFromTemplate: "gpu:write",
    CreateInstance: "gpu:write",
    ListInstances: "gpu:read",
    GetInstance: "gpu:read",
    GetInstanceEnhanced: "gpu:read",
    GetCostAnalysis: "gpu:read",
    ListInstanceLogs: "gpu:read",
    DestroyInstance: "gpu:write",
    GetStatistics: "gpu:read",
    // A secret that lets its holder call the model directly: as much power as renting it.
    GetModelKey: "gpu:write",
    CreateEndpoint: "gpu:write",
    ListEndpoints: "gpu:read",
    GetEndpoint: "gpu:read",
    UpdateEndpoint: "gpu:write",
    DeleteEndpoint: "gpu:write",
    ListEndpointEvents: "gpu:read",
    GetEndpointHistory: "gpu:read",
    GetSpend: "gpu:read",
    ListMarkets: "gpu:read",
    CreateKey: "gpu:write",
    ListKeys: "gpu:read",
    GetKey: "gpu:read",
    UpdateKey: "gpu:write",
    RotateKey: "gpu:write",
    DeleteKey: "gpu:write",
    GetKeyUsage: "gpu:read",
  },
  "search.v1.IndexingService": {
    IndexGoods: "indexing:run",
    RunProductBatch: "indexing:run",
    GetIndexStatus: "indexing:read",
    ListBatchLogs: "indexing:read",
  },
};

/**
 * Non-RPC routes: an exact path, or a prefix ending in "/". Health checks (/healthz, /readyz) stay
 * open, and so does the dashboard's page (/dashboard...: it holds no data; its data calls are RPCs).
 */
export const HTTP_ROUTE_SCOPES: ReadonlyArray<{ path: string; prefix?: boolean; scope: Scope }> = [
  { path: "/metrics", scope: "ops:read" },
  { path: "/openapi.json", scope: "ops:read" },
  { path: "/docs", scope: "ops:read" },
  { path: "/docs/", prefix: true, scope: "ops:read" },
  { path: "/endpoints/", prefix: true, scope: "endpoints:invoke" },
];

/** The scope an RPC needs, or undefined when the table forgot it. */
export function scopeOfRpc(serviceTypeName: string, methodName: string): Scope | undefined {
  return RPC_SCOPES[serviceTypeName]?.[methodName];
}

/** The scope a non-RPC path needs, or undefined when it is not in the table (REST routes, health). */
export function scopeOfHttpPath(path: string): Scope | undefined {
  return HTTP_ROUTE_SCOPES.find((route) => (route.prefix ? path.startsWith(route.path) : path === route.path))?.scope;
}
