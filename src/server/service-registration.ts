import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";

// A service as the server takes it: its descriptor, its implementation for the in-process REST
// caller, and its registration on the Connect router.

export interface ServiceRegistration {
  desc: DescService;
  /** The RPC implementations by local name, for the in-process REST caller. */
  impl: object;
  /** Registers the implementation on the Connect router, typed against its own descriptor. */
  route(router: ConnectRouter): void;
}

/** RPCs left out answer `unimplemented` (HTTP 501); the product's services implement every one. */
export function registration<T extends DescService>(desc: T, impl: Partial<ServiceImpl<T>>): ServiceRegistration {
  return { desc, impl, route: (router) => router.service(desc, impl) };
}
